"""Streaming teacher benchmark: seconds per streamed day, phase by phase, the recipe before
the streaming speed-ups vs the shipped one, side by side.

    python -m benchmarks.bench_teacher_stream [--json OUT] [--quick] [--threads N] [--repeats 5]
        [--rows 75000] [--candidate NAME:key=value,key=value ...]

The benchmark's GEM teacher (experiments/benchmark.yaml, ``teacher:``) streams days [0, 22) of
each of its worlds (24,000 impressions a day) with a checkpoint at each day's end; a day is the
unit of its cost. Here one streamed day is one ``fit_teacher(..., stream=True)`` over day 0 of a
world generated with the base preset's knobs (``--rows`` impressions, default the preset's
75,000; ``--quick``: 5,000), timed by :class:`benchmarks.stream_phases.PhaseTimer`: read,
forward, backward, zero_grad+clip, optimizer, the day's checkpoint, the rest of the loop;
``setup`` is the fit's fixed cost (the labels-only base-rate pass, building the model,
Lightning's start-up: once per fit, not per day) and ``checkpoint`` the fit's final
``last.ckpt`` (once per fit). ``day_seconds`` = the loop less that final save: what each of the
stream's days costs.

Candidates: ``before`` is ``small`` with the benchmark's 256-event cap and the recipe it had
before the streaming speed-ups (:data:`BEFORE`), on GEM's reference code paths (the code
before those speed-ups, :func:`benchmarks.gem_reference.set_reference_paths`); ``after`` is the
streaming teacher experiments/benchmark.yaml ships, built from the spec as ``gemkd run`` builds it
(:func:`shipped_config`); ``--candidate`` adds others (config keys on ``small``, or on the
teacher config ``config=NAME`` names; ``reference_paths=true``). They run in interleaved rounds
(each once per round, the order rotating), after one untimed warm-up round; the figures are
medians, the speed-ups both the ratio of the medians and the median of the rounds' own ratios,
and only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import yaml
from lightning.pytorch.callbacks import Callback

from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    print_figures,
    quiet_lightning,
    write_json,
)
from benchmarks.gem_reference import set_reference_paths
from benchmarks.stream_phases import PHASES, PhaseTimer
from benchmarks.transfer_figures import paired
from gemkd.experiments.teacher.teacher_config import (
    TEACHER_CONFIGS,
    TeacherTrainConfig,
    find_config,
    load_teacher_config,
)
from gemkd.experiments.teacher.teacher_fit import fit_teacher
from gemkd.transfer.data.synth import SynthConfig, generate
from gemkd.transfer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
#: the spec whose streaming teacher ``after`` is
SPEC = ROOT / "experiments" / "benchmark.yaml"
#: the ``small`` recipe before the streaming speed-ups, as the benchmark streamed it
BEFORE: dict[str, Any] = {"batch_size": 512, "lr": 0.002, "embedding_lr": 0.01, "prefetch": 0}
#: the benchmark's override of the teacher config before the speed-ups (``teacher: {config: small,
#: max_seq_len: 256}``); ``--candidate`` recipes start from it too
BENCHMARK_OVERRIDES: dict[str, Any] = {"max_seq_len": 256}
#: candidate keys that are not config keys: ``config`` (the teacher config a candidate starts
#: from, default ``small``), ``reference_paths`` (train with GEM's reference code paths,
#: :func:`benchmarks.gem_reference.set_reference_paths`: the code before the speed-ups)
PSEUDO_KEYS = ("config", "reference_paths")
DAY_ROWS = 75_000  # the base preset's impressions per day
QUICK_ROWS = 5_000


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A recipe to time: its config, and whether its GEM runs the reference code paths."""

    config: TeacherTrainConfig
    reference_paths: bool = False


class ReferencePaths(Callback):
    """Puts the fit's GEM on its reference code paths before the first step."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        set_reference_paths(pl_module)


def world(out: Path, rows: int) -> Path:
    """One day of the base preset's world (its knobs, ``rows`` impressions)."""
    knobs = yaml.safe_load((ROOT / "experiments" / "data" / "base.yaml").read_text())
    knobs.update(n_days=1, examples_per_day=rows)
    generate(SynthConfig(**knobs), out)
    return out


def one_day_of(cfg: TeacherTrainConfig) -> TeacherTrainConfig:
    """``cfg`` on day 0 alone, nothing to validate or choose."""
    return dataclasses.replace(cfg, train_days=[0, 1], val_days=None, test_days=None,
                               select="last", patience=None)


def candidate_config(overrides: dict[str, Any], config: str = "small") -> TeacherTrainConfig:
    """``config`` (``small``) as shipped, with :data:`BENCHMARK_OVERRIDES`, on day 0, then
    ``overrides`` (``model.KEY`` keys replace one model hyper-parameter)."""
    cfg = load_teacher_config(find_config(config, TEACHER_CONFIGS), BENCHMARK_OVERRIDES)
    top = {k: v for k, v in overrides.items() if not k.startswith("model.")}
    model = {**cfg.model, **{k.removeprefix("model."): v for k, v in overrides.items()
                             if k.startswith("model.")}}
    return dataclasses.replace(one_day_of(cfg), model=model, **top)


def shipped_config(spec: Path = SPEC) -> TeacherTrainConfig:
    """The streaming teacher ``spec`` trains (its ``teacher:`` config and overrides, as
    ``gemkd run`` builds it), on day 0: the ``after`` recipe."""
    from gemkd.experiments.run.preflight import plan_run
    from gemkd.experiments.spec.load import load_spec

    loaded = load_spec(spec)
    return one_day_of(plan_run(loaded).teachers[0])


def parse_candidate(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:key=value,key=value`` (values parsed as YAML) → ``(NAME, {key: value})``."""
    from gemkd.experiments.spec.load import parse_set

    name, sep, rest = text.partition(":")
    if not sep or not name:
        raise ConfigError(f"--candidate {text!r}: expected NAME:key=value[,key=value]")
    return name, parse_set(filter(None, rest.split(",")), f"--candidate {text!r}:")


def candidate(overrides: dict[str, Any]) -> Candidate:
    """A ``--candidate``'s overrides (:data:`PSEUDO_KEYS` included) → its :class:`Candidate`."""
    rest = {k: v for k, v in overrides.items() if k not in PSEUDO_KEYS}
    return Candidate(candidate_config(rest, str(overrides.get("config", "small"))),
                     bool(overrides.get("reference_paths", False)))


def recipes(p: argparse.ArgumentParser, texts: list[str]) -> dict[str, Candidate]:
    """The old recipe (``before``: :data:`BEFORE` on GEM's reference code paths), the shipped
    one (``after``: :func:`shipped_config`) and each ``--candidate``; a bad candidate is the
    parser's error."""
    out = {"before": Candidate(candidate_config(BEFORE), reference_paths=True),
           "after": Candidate(shipped_config())}
    for text in texts:
        try:
            name, overrides = parse_candidate(text)
            out[name] = candidate(overrides)
        except (ValueError, TypeError, ConfigError) as e:
            p.error(str(e))
    return out


def callbacks_of(c: Candidate) -> list[Callback]:
    """The fit's extra callbacks for ``c`` (its reference paths)."""
    return [ReferencePaths()] if c.reference_paths else []


def one_day(c: Candidate, data: Path, out: Path) -> dict[str, float]:
    """Stream day 0 once into ``out``; seconds per phase, ``setup`` and ``day_seconds``."""
    timer = PhaseTimer()
    t0 = time.perf_counter()
    fit_teacher(c.config, data, out, stream=True, progress=False,
                callbacks=[*callbacks_of(c), timer])
    total = time.perf_counter() - t0
    s = timer.seconds()
    return {**s, "setup": total - s["loop"], "fit_total": total,
            "day_seconds": s["loop"] - s["checkpoint"]}


def run(candidates: dict[str, Candidate], data: Path, repeats: int
        ) -> dict[str, list[dict[str, float]]]:
    """Interleaved rounds (one untimed warm-up round), each candidate once per round, the order
    rotating; every fit in a fresh run directory."""
    names = list(candidates)
    times: dict[str, list[dict[str, float]]] = {k: [] for k in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats + 1):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                row = one_day(candidates[k], data, Path(tmp) / f"{k}-{r}")
                if r:
                    times[k].append(row)
                print(f"  round {r}{' (warm-up)' if not r else ''} {k}: "
                      f"{row['day_seconds']:.1f} s/day, {row['steps']:.0f} steps", flush=True)
    return times


def describe(c: Candidate) -> dict[str, Any]:
    """What a candidate is, for the JSON: its trainer keys, model and code paths."""
    keys = ("name", "batch_size", "lr", "embedding_lr", "prefetch", "max_seq_len", "compile",
            "precision", "model")
    return {**{f: getattr(c.config, f) for f in keys}, "reference_paths": c.reference_paths}


def day_seconds(rows: list[dict[str, float]]) -> list[float]:
    return [r["day_seconds"] for r in rows]


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


def report(res: dict) -> None:
    cols = [*PHASES, "day_seconds", "setup"]
    print(f"one streamed day ({res['rows']:,} rows), medians of {res['repeats']} interleaved "
          f"rounds, {res['threads']} threads; seconds per phase:")
    print(f"{'candidate':<12}" + "".join(f"{c:>15}" for c in cols) + f"{'steps':>7}")
    for name, m in res["medians"].items():
        print(f"{name:<12}" + "".join(f"{m[c]:>15.2f}" for c in cols) + f"{m['steps']:>7.0f}")
    for name, ratio in res["speedup_vs_before"].items():
        value, note = res["speedup_paired"][name]
        print(f"speed-up per streamed day, {name} vs before: {ratio:.2f}x (ratio of medians); "
              f"{value:.2f}x (median of the rounds' ratios{', ' + note if note else ''})")


def figures(res: dict) -> list[dict]:
    rows, out = res["rows"], []
    before = res["medians"]["before"]
    out.append(figure("GEM small streamed day, before: forward + backward share of the day",
                      100 * (before["forward"] + before["backward"]) / before["day_seconds"],
                      "%"))
    for name, m in res["medians"].items():
        out.append(figure(f"GEM small streamed day ({rows:,} rows, base world), {name}: "
                          "seconds per day", m["day_seconds"], "s"))
    for name, ratio in res["speedup_vs_before"].items():
        target = ">= 1.5" if name == "after" else None
        out.append(figure(f"GEM small streamed day: {name} ÷ before speed (same run)", ratio,
                          "x", target))
        value, note = res["speedup_paired"][name]
        out.append(figure(f"GEM small streamed day: {name} ÷ before speed, median of the "
                          "rounds' own ratios", value, "x", None, note))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p)
    p.add_argument("--rows", type=int, default=None,
                   help=f"impressions in the streamed day (default {DAY_ROWS:,}, the base "
                        f"preset's; --quick: {QUICK_ROWS:,})")
    p.add_argument("--candidate", action="append", default=[],
                   help="NAME:key=value[,key=value]: also time small with these config keys "
                        "(model.KEY: a model hyper-parameter; config=NAME: start from that "
                        "teacher config; reference_paths=true: GEM's reference code paths)")
    p.add_argument("--data", type=Path, default=None,
                   help="stream day 0 of this dataset instead of generating one")
    args = p.parse_args()
    apply_common_args(p, args)
    quiet_lightning()
    import torch

    rows = args.rows or (QUICK_ROWS if args.quick else DAY_ROWS)
    candidates = recipes(p, args.candidate)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or world(Path(tmp) / "world", rows)
        times = run(candidates, data, args.repeats)
    med = {k: medians(v) for k, v in times.items()}
    res: dict[str, Any] = {
        "bench": "teacher_stream", "quick": args.quick, "rows": rows, "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "candidates": {k: describe(c) for k, c in candidates.items()},
        "medians": med,
        "speedup_vs_before": {k: round(med["before"]["day_seconds"] / m["day_seconds"], 3)
                              for k, m in med.items() if k != "before"},
        # each round runs every candidate minutes apart: its own ratio is steadier against the
        # shared machine's drift than a ratio of medians taken from different rounds
        "speedup_paired": {k: paired(day_seconds(times["before"]), day_seconds(v))
                           for k, v in times.items() if k != "before"},
        "runs": times,
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    report(res)
    res["figures"] = figures(res)
    print_figures(res["figures"])
    write_json(args.json, res)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()

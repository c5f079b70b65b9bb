"""The Student Adapter's own gain, and what it learned, on the stores of a finished run
(docs/results/STALENESS.md, docs/results/RESULTS.md).

    python -m studies.adapter_probe --run runs/benchmark --out runs/benchmark/adapter_probe \\
        [--worlds 0 1 2] [--lags 0 3 6] [--seeds 0 1 2] [--arms ...] [--threads 1]

For every (world, lag) cell of ``--run`` (found from its cache:
:func:`gemkd.experiments.run_dir.run_cells.find_cells`) and every seed, student arms are trained
on the run's own teacher stores with the hyper-parameters the run's search chose (``tuning.csv``),
each arm's evaluation written as the run writes it
(``OUT/clusters/world=W/lag=L/<arm>__seed<S>.npz``).
The arms isolate the adapter:

- ``kd_aux`` / ``kd_aux_adapter`` — the built-in pair (the adapter's own gain), each with the
  values its own search chose;
- ``kd_aux_adapter_same`` — kd_aux's chosen values plus the adapter at its default width: the
  adapter is then the only difference (the built-in pair also differs by two searches);
- ``kd`` / ``kd_adapter`` — the same without the auxiliary head (``kd_adapter`` takes KD's chosen
  values and the adapter width ``kd_aux_adapter`` chose);
- ``kd_aux_adapter_separate`` — the adapter updated before the student's step by its own
  optimiser (ExFM's order) instead of fused into it;
- ``kd_aux_adapter_lr1e-3`` / ``kd_aux_adapter_lr1e-1`` — its learning rate ÷ 10 and × 10;
- ``kd_aux_adapter_nostale`` — without the staleness input;
- ``kd_alpha1`` / ``kd_adapter_alpha1`` — KD's chosen values but α = 1 (pure distillation: no
  label term, so the student's calibration comes from the targets alone), without and with the
  adapter;
- ``kd_t1`` / ``kd_adapter_t1`` — KD's chosen α at temperature 1, without and with the adapter.

Every adapter arm's trained adapter is run once more over the student's training stream and
binned (:class:`gemkd.adapters.learned_map.LearnedMap`): the calibration Σp/Σy and NE of the
teacher's targets before and after the adapter, and the learned map (teacher logit → adapted
logit, beside the labels' own log-odds). Written: ``OUT/records.jsonl`` (one line per run: NE,
train seconds, the map's state; a rerun skips finished runs), ``OUT/gains.csv`` (each arm against
its reference with the report's paired, user-level bootstrap nested with seeds and worlds),
``OUT/calibration.csv``, ``OUT/summary.md``, ``OUT/source.json`` (the sha256 of the run's
tuning.csv the arms' knobs came from: the report flags a probe the run's search has since
outdated, and a rerun retrains the arms whose knobs changed) and ``OUT/learned_map_<arm>.png``
(one line per lag, pooled over worlds and seeds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pandas as pd

from benchmarks.common import add_common_args, apply_common_args, quiet_lightning
from gemkd.adapters.learned_map import (
    LearnedMap,
    collect_learned_map,
    plot_learned_map,
)
from gemkd.adapters.methods.student_adapter_method import Adapter
from gemkd.experiments.report.results_md import PROBE_SOURCE
from gemkd.experiments.run.jobs import InputPaths
from gemkd.experiments.run.methods import search_space
from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.run.search import single_point
from gemkd.experiments.run.student import StudentJob, student_datamodule, train_student
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.run_cells import Cell, find_cells
from gemkd.experiments.spec.run_spec import RunSpec, VariantSpec
from gemkd.transfer.data.schema import day_range
from gemkd.transfer.io.atomic import atomic_write_bytes
from gemkd.transfer.methods.space import IntRange
from gemkd.transfer.training.trainer import training_base_rates

_ADAPTER = "adapter"


def _adapter(**init_args: Any) -> dict[str, Any]:
    return {"class_path": _ADAPTER, "init_args": init_args}


#: arm → (the variant whose chosen values it takes, its methods[, values set over the chosen])
ARMS: dict[str, tuple] = {
    "baseline": ("baseline", []),
    "kd": ("kd", ["kd"]),
    "kd_adapter": ("kd", ["kd", _ADAPTER]),
    "kd_aux": ("kd_aux", ["kd", "aux_head"]),
    "kd_aux_adapter": ("kd_aux_adapter", ["kd", "aux_head", _ADAPTER]),
    "kd_aux_adapter_same": ("kd_aux", ["kd", "aux_head", _ADAPTER]),
    "kd_aux_adapter_separate": ("kd_aux_adapter",
                                ["kd", "aux_head", _adapter(update="separate")]),
    "kd_aux_adapter_lr1e-3": ("kd_aux_adapter", ["kd", "aux_head", _adapter(adapter_lr=1e-3)]),
    "kd_aux_adapter_lr1e-1": ("kd_aux_adapter", ["kd", "aux_head", _adapter(adapter_lr=1e-1)]),
    "kd_aux_adapter_nostale": ("kd_aux_adapter",
                               ["kd", "aux_head", _adapter(use_staleness=False)]),
    # pure distillation (α = 1): the student's calibration comes from the targets alone
    "kd_alpha1": ("kd", ["kd"], {"alpha": 1.0}),
    "kd_adapter_alpha1": ("kd", ["kd", _ADAPTER], {"alpha": 1.0}),
    # temperature 1: the distilled probabilities are the targets' own (at T > 1 a student that
    # cannot tell rows apart averages softened targets and under-predicts a rare event)
    "kd_t1": ("kd", ["kd"], {"temperature": 1.0}),
    "kd_adapter_t1": ("kd", ["kd", _ADAPTER], {"temperature": 1.0}),
}
#: arm → the arm its own gain is measured against
REFERENCES = {"kd_adapter": "kd", "kd_aux_adapter": "kd_aux", "kd_aux_adapter_same": "kd_aux",
              "kd_aux_adapter_separate": "kd_aux", "kd_aux_adapter_lr1e-3": "kd_aux",
              "kd_aux_adapter_lr1e-1": "kd_aux", "kd_aux_adapter_nostale": "kd_aux",
              "kd_adapter_alpha1": "kd_alpha1", "kd_adapter_t1": "kd_t1"}


def chosen_params(spec: RunSpec, tuning: pd.DataFrame | None, variant: str, lag: int,
                  world: int, seed: int) -> dict[str, Any]:
    """The values the run chose for ``variant`` at (lag, world) for final seed ``seed``: its
    search's (tuning.csv; under ``tuning.draws: per_seed`` the seed's own draw), or the one
    point of a space with nothing to search (every knob a one-value list)."""
    if variant not in spec.variant_names:
        raise SystemExit(f"the run has no variant {variant!r} (variants: "
                         f"{', '.join(spec.variant_names)}): leave out the arms that need it")
    space = search_space(spec, spec.variant(variant))
    fixed = single_point(space)
    if fixed is not None:
        return fixed
    if tuning is None:
        raise SystemExit(f"the run searched {variant!r}'s knobs but has no tuning.csv")
    rows = tuning[(tuning["variant"] == variant) & (tuning["teacher_lag_days"] == lag)
                  & (tuning["chosen"])]
    if "world" in rows:
        rows = rows[rows["world"] == world]
    if "draw" in rows and rows["draw"].notna().any():  # a search per final seed
        draws = sorted(int(d) for d in rows["draw"].dropna().unique())
        rows = rows[rows["draw"] == seed]
        if rows.empty:
            raise SystemExit(f"the run searched {variant!r} per final seed (draws {draws}): "
                             f"seed {seed} has no search of its own; probe the run's seeds")
    out = {}
    for _, r in rows.iterrows():
        v = r["value"]
        try:  # tuning.csv holds text: a number back in its range's own type
            v = int(float(v)) if isinstance(space.get(r["param"]), IntRange) else float(v)
        except (TypeError, ValueError):
            pass
        out[str(r["param"])] = v
    return out


def arm_params(spec: RunSpec, tuning: pd.DataFrame | None, arm: str, lag: int, world: int,
               seed: int) -> dict[str, Any]:
    """The chosen values of the arm's source variant (for ``seed``), with the values the arm
    sets over them; a KD arm with the adapter takes the adapter width kd_aux_adapter chose."""
    source, methods, *fixed = ARMS[arm]
    params = chosen_params(spec, tuning, source, lag, world, seed)
    if source == "kd" and _has_adapter(methods):
        width = chosen_params(spec, tuning, "kd_aux_adapter", lag, world, seed
                              ).get("adapter_hidden")
        if width is not None:
            params["adapter_hidden"] = int(width)
    return {**params, **(fixed[0] if fixed else {})}


def _has_adapter(methods: list[Any]) -> bool:
    return any((m if isinstance(m, str) else m["class_path"]) == _ADAPTER for m in methods)


class _CaptureMap(pl.Callback):
    """After the fit: run the trained adapter over the training stream again (the rows its KD
    targets came from: in-sample) and over the evaluation days (out of sample: would its
    correction hold on later days?), and bin both."""

    def __init__(self, spec: RunSpec, job: StudentJob, data: Path) -> None:
        self.spec, self.job, self.data = spec, job, data
        self.maps: dict[str, LearnedMap] = {}

    def on_train_end(self, trainer, module) -> None:
        method = next(m for m in module.methods if isinstance(m, Adapter))
        dm = student_datamodule(self.spec, self.job, self.data, module.model)
        for name, loader in (("train", dm.train_dataloader()), ("eval", dm.test_dataloader())):
            self.maps[name] = collect_learned_map(method, module.teacher, loader,
                                                  list(self.spec.student_tasks),
                                                  self.job.trained_until_day)


def run_cell(spec: RunSpec, cell: Cell, arms: list[str], seeds: list[int],
             tuning: pd.DataFrame | None, out: Path, done: dict[str, dict]) -> None:
    """Train every arm × seed of one cell not yet in ``done``; append each to records.jsonl."""
    tasks = list(spec.student_tasks)
    only = [spec.student_domain] if spec.student_domain else None
    base_rates = training_base_rates(cell.data, day_range(spec.student_days), tasks, only)
    inputs = InputPaths(dict(cell.stores), cell.codes, cell.ckpt).open(spec.repr.max_events)
    for arm in arms:
        methods = ARMS[arm][1]
        variant = VariantSpec.parse(arm, methods, "adapter_probe arms")
        for seed in seeds:
            params = arm_params(spec, tuning, arm, cell.lag, cell.world, seed)
            key = f"{arm}|{seed}|{cell.lag}|{cell.world}"
            if key in done and _same(done[key]["params"], params):
                continue  # (other params: the run's search chose anew since; train again)
            job = StudentJob(variant, params, seed, day_range(spec.student_days),
                             day_range(spec.eval_days), cell.trained_until_day)
            capture = _CaptureMap(spec, job, cell.data) if _has_adapter(methods) else None
            clusters = RunDir(out).clusters_path(cell.world, cell.lag, f"{arm}__seed{seed}")
            t0 = time.perf_counter()
            res = train_student(spec, job, cell.data, inputs, base_rates,
                                callbacks=[capture] if capture else None,
                                clusters_path=clusters)
            record = {"key": key, "arm": arm, "seed": seed, "lag": cell.lag,
                      "world": cell.world, "params": params,
                      "ne": {t: res["metrics"][f"ne/{t}/all"] for t in tasks},
                      "calibration": {t: res["metrics"][f"calibration/{t}/all"] for t in tasks},
                      "train_seconds": res["train_seconds"],
                      "run_seconds": time.perf_counter() - t0,
                      "maps": ({k: m.state() for k, m in capture.maps.items()}
                               if capture else None)}
            with open(out / "records.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            done[key] = record
            print(f"  world {cell.world} lag {cell.lag} {arm:24s} seed {seed}: NE "
                  + " ".join(f"{t} {v:.4f}" for t, v in record["ne"].items())
                  + f" ({res['train_seconds']:.1f} s)", flush=True)


def _same(a: dict, b: dict) -> bool:
    """The same knobs, as records.jsonl stores them (JSON)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                     default=str)


def read_records(out: Path) -> dict[str, dict]:
    path = out / "records.jsonl"
    if not path.exists():
        return {}
    return {r["key"]: r for r in map(json.loads, path.read_text().splitlines()) if r}


def calibration_table(records: list[dict]
                      ) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple, LearnedMap]]:
    """Per arm, lag, rows (``train``: the student's stream, ``eval``: the evaluation days) and
    task, pooled over worlds and seeds: the calibration and NE of the teacher's targets before
    and after the adapter; the same per run; the pooled maps by (arm, lag, rows)."""
    rows = []
    maps: dict[tuple[str, int, str], LearnedMap] = {}
    for r in records:
        for where, state in (r.get("maps") or {}).items():
            m = LearnedMap.from_state(state)
            for _, c in m.calibration().iterrows():
                rows.append({"arm": r["arm"], "lag": r["lag"], "rows_of": where,
                             "world": r["world"], "seed": r["seed"], **c.to_dict()})
            k = (r["arm"], r["lag"], where)
            maps[k] = maps[k].merge(m) if k in maps else m
    pooled = []
    for (arm, lag, where), m in sorted(maps.items()):
        for _, c in m.calibration().iterrows():
            pooled.append({"arm": arm, "lag": lag, "rows_of": where, **c.to_dict()})
    return pd.DataFrame(pooled), pd.DataFrame(rows), maps


def gains_table(out: Path, arms: list[str]) -> pd.DataFrame:
    from gemkd.experiments.report.variant_pairs import paired_difference

    frames = [paired_difference(out, arm, REFERENCES[arm]) for arm in arms
              if arm in REFERENCES and REFERENCES[arm] in arms]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _f(x: float, digits: int = 4) -> str:
    return f"{x:+.{digits}f}"


def summary_markdown(name: str, gains: pd.DataFrame, calib: pd.DataFrame,
                     records: list[dict], domain: str, task: str) -> str:
    lines = [f"# Student Adapter probe: {name}", "",
             f"Own gain = ΔNE(arm) − ΔNE(reference) on the evaluation days ({task}, domain "
             f"{domain}), 95 % interval of the paired user-level bootstrap nested with seeds and "
             "worlds; positive = the arm is better.", "",
             "| arm | reference | lag | own gain [95 % interval] | verdict | per world |",
             "|---|---|---:|---:|---|---|"]
    g = gains[(gains["task"] == task) & (gains["domain"] == domain)] if not gains.empty else gains
    for _, r in g.iterrows():
        per = ", ".join(f"{w}: {_f(v)}" for w, v in r["per_world"].items())
        lines.append(f"| {r['variant']} | {r['reference']} | {r['teacher_lag_days']} | "
                     f"{_f(r['diff'])} [{_f(r['diff_lo'])}, {_f(r['diff_hi'])}] | "
                     f"{r['verdict'] or 'not resolved'} | {per} |")
    lines += ["", "The teacher's targets before → after the adapter (pooled over worlds and "
              "seeds): calibration Σp/Σy and NE against the labels on the evaluation days (out "
              "of sample: the adapter learnt from the student's stream before them; the stream's "
              "own rows are in calibration.csv, `rows_of` train).", "",
              "| arm | lag | rows of | task | rows | calibration teacher → adapted | "
              "NE teacher → adapted |", "|---|---:|---|---|---:|---:|---:|"]
    shown = calib[calib["rows_of"] == "eval"] if "rows_of" in calib else calib
    for _, r in shown.iterrows():
        lines.append(f"| {r['arm']} | {r['lag']} | {r['rows_of']} | {r['task']} | "
                     f"{int(r['rows']):,} | "
                     f"{r['teacher_calibration']:.3f} → {r['adapted_calibration']:.3f} | "
                     f"{r['teacher_ne']:.4f} → {r['adapted_ne']:.4f} |")
    own = pd.DataFrame([{"arm": r["arm"], "lag": r["lag"], "ne": r["ne"][task],
                         "calibration": r["calibration"][task]}
                        for r in records if "calibration" in r])
    if not own.empty:
        lines += ["", f"The students themselves on the evaluation days ({task}; mean over worlds "
                  "and seeds): NE and calibration Σp/Σy.", "",
                  "| arm | lag | NE | calibration |", "|---|---:|---:|---:|"]
        for (arm, lag), d in own.groupby(["arm", "lag"]):
            lines.append(f"| {arm} | {lag} | {d['ne'].mean():.4f} | "
                         f"{d['calibration'].mean():.3f} |")
    secs = pd.DataFrame([{"arm": r["arm"], "s": r["train_seconds"]} for r in records])
    if not secs.empty:
        med = secs.groupby("arm")["s"].median()
        lines += ["", "Median training seconds per run (this machine, as loaded when run): "
                  + ", ".join(f"{a} {s:.2f}" for a, s in med.items()), ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a finished gemkd run directory")
    p.add_argument("--out", default=None, help="output folder (default RUN/adapter_probe)")
    p.add_argument("--name", default=None, help="a label for the summary (default: run name)")
    p.add_argument("--worlds", type=int, nargs="*", default=None)
    p.add_argument("--lags", type=int, nargs="*", default=None)
    p.add_argument("--seeds", type=int, nargs="*", default=None, help="default: the spec's")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--task", default=None, help="the summary's task (default: the first)")
    add_common_args(p)
    args = p.parse_args(argv)
    quiet_lightning()
    apply_common_args(p, args)
    arms = list(dict.fromkeys(["baseline", *args.arms]))  # ΔNE needs the labels-only arm
    run = RunDir(args.run)
    spec = run.run_spec()
    out = Path(args.out) if args.out else run / "adapter_probe"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / RunDir.SPEC, out / RunDir.SPEC)  # bootstrap settings for the report
    tuning = run.tuning()
    seeds = args.seeds if args.seeds is not None else list(spec.seeds)
    cells = [c for c in find_cells(run, plan_run(spec).seen)
             if (args.worlds is None or c.world in args.worlds)
             and (args.lags is None or c.lag in args.lags)]
    done = read_records(out)
    for cell in cells:
        print(f"== world {cell.world}, lag {cell.lag} (teacher trained until day "
              f"{cell.trained_until_day})", flush=True)
        run_cell(spec, cell, arms, seeds, tuning, out, done)
    wanted = {(c.world, c.lag) for c in cells}
    records = [r for r in done.values() if (r["world"], r["lag"]) in wanted
               and r["arm"] in arms and r["seed"] in seeds]
    task = args.task or spec.student_tasks[0]
    domain = spec.student_domain or "all"
    gains = gains_table(out, arms)
    calib, per_run, maps = calibration_table(records)
    gains.to_csv(out / "gains.csv", index=False)
    calib.to_csv(out / "calibration.csv", index=False)
    per_run.to_csv(out / "calibration_runs.csv", index=False)
    plots = []
    for arm in sorted({a for a, _, _ in maps}):
        lag_maps = {f"lag {lag}": m for (a, lag, where), m in sorted(maps.items())
                    if a == arm and where == "train"}
        plots.append(str(plot_learned_map(lag_maps, out / f"learned_map_{arm}.png",
                                          title=f"{args.name or run.name}: {arm}")))
    md = summary_markdown(args.name or run.name, gains, calib, records, domain, task)
    atomic_write_bytes(out / PROBE_SOURCE, json.dumps({"tuning_sha256": run.tuning_digest()},
                                                      indent=1).encode())
    atomic_write_bytes(out / "summary.md", md.encode())
    print(md)
    return {"gains": gains, "calibration": calib, "plots": plots}


if __name__ == "__main__":
    main()

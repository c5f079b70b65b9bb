"""What a streaming teacher's days of data buy: its NE on fixed evaluation days, and its share
of the student's gap to the oracle, against the days it has seen — GEM beside the MLP ranker.

    python -m studies.teacher_scaling --run runs/benchmark --every 3 --threads 2 \\
        --json scaling.json --markdown scaling.md --plots docs/figures

``--run`` is a ``gemkd run`` directory of a spec with ``teacher_protocol: streaming`` (the
benchmark): for every world of it, the GEM fit's daily checkpoints (``day=N.ckpt``) are
evaluated as they are; the MLP ranker (``--mlp-config``, default ``mlp_small``, same histories
cap) is fit the same way — one time-ordered pass with daily checkpoints over the same days —
into ``RUN/scaling/mlp-w<world>`` (resumed or reused). Each checkpoint every ``--every`` days
(and the last) is scored on the spec's evaluation days of the student domain, with the NE base
rate of the student's training days (the run's convention, so the last point equals the run's
lag-0 teacher NE), and on every domain. The headroom shares use the run's labels-only baseline
(results.csv, lag 0) and the world's oracle and feature oracle on the same rows:
share = (NE(baseline) − NE(teacher)) / (NE(baseline) − NE(reference)).

Printed and written: per model and days seen, the mean over worlds; GEM − MLP paired per world
at the last day (a difference holds when it exceeds 2 std of the per-world differences); the
slope of NE against log2(days) over the second half of the curve and, where the shares still
rise, the days at which that log-linear trend would reach the targets (an extrapolation).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from benchmarks.common import add_common_args, apply_common_args, command, machine
from gemkd.experiments.run.evaluation import (
    eval_metrics,
    feature_oracle_metrics,
    oracle_logits,
)
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import BASELINE
from gemkd.experiments.run_dir.run_cells import TeacherFit, teacher_fits
from gemkd.experiments.teacher.teacher_config import (
    TEACHER_CONFIGS,
    find_config,
    load_teacher,
    load_teacher_config,
)
from gemkd.transfer.teacher_fit_dir import TeacherFitDir
from gemkd.transfer.training import training_base_rates

TARGETS = {"oracle": 0.40, "feature_oracle": 0.60}  # the headroom targets (docs/results/TEACHER.md)


def find_worlds(run: Path) -> list[TeacherFit]:
    """Each world's data and streaming GEM fit in ``run``'s cache (matched on the data's key)."""
    return teacher_fits(RunDir(run), streaming=True)


def fit_mlp(world: TeacherFit, out: Path, mlp_config: str) -> Path:
    """The MLP ranker streamed over the GEM fit's days with its histories cap (resumable)."""
    from gemkd.experiments.teacher.teacher_fit import fit_teacher

    gem = load_teacher_config(TeacherFitDir(world.run).config_file)
    cfg = dataclasses.replace(load_teacher_config(find_config(mlp_config, TEACHER_CONFIGS)),
                              train_days=gem.train_days, val_days=None, test_days=None,
                              max_seq_len=gem.max_seq_len, seed=gem.seed, stream=True,
                              max_epochs=1, select="last", patience=None)
    if not TeacherFitDir(out).has_summary():
        fit_teacher(cfg, world.data, out, resume=True, progress=False)
    return out


def model_logits(ckpt: Path, data: Path, tasks: list[str]):
    """``(logits_fn, max_seq_len)`` of the teacher at ``ckpt`` (eval mode) for ``tasks``."""
    teacher = load_teacher(ckpt, data)
    model = teacher.model.eval()
    cols = [teacher.schema.tasks.index(t) for t in tasks]

    @torch.inference_mode()
    def fn(batch) -> torch.Tensor:
        return model(batch).logits[:, cols]

    return fn, teacher.cfg.max_seq_len


def scores(world: TeacherFit, spec: dict[str, Any], runs: dict[str, Path], every: int,
           baseline: dict[str, float]) -> list[dict[str, Any]]:
    """One row per model × checkpoint × task × scope (the student domain, every domain)."""
    data, tasks, domain = world.data, list(spec["student_tasks"]), spec["student_domain"]
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(data)
    eval_days = tuple(spec["eval_days"])
    scopes = {domain: [domain], "all": None}
    rates = {s: training_base_rates(data, tuple(spec["student_days"]), tasks, only)
             for s, only in scopes.items()}
    refs = {s: {"oracle": eval_metrics(data, eval_days, tasks, schema.domains, rates[s],
                                       oracle_logits, only),
                "feature_oracle": feature_oracle_metrics(data, eval_days, tasks, schema.domains,
                                                         rates[s], only)}
            for s, only in scopes.items()}
    rows_per_day = {int(d): n for d, n in schema.rows_per_day.items()}
    out = []
    for model, run in runs.items():
        ckpts = TeacherFitDir(run).days()
        last = max(ckpts)
        for day in sorted(d for d in ckpts if (d + 1) % every == 0 or d == last):
            fn, seq = model_logits(ckpts[day], data, tasks)
            for scope, only in scopes.items():
                m = eval_metrics(data, eval_days, tasks, schema.domains, rates[scope], fn, only,
                                 max_seq_len=seq)
                for task in tasks:
                    key = f"{task}/{domain if scope != 'all' else 'all'}"
                    ne = m[f"ne/{key}"]
                    row = {"world": world.seed, "model": model, "day": day, "days_seen": day + 1,
                           "rows_seen": sum(rows_per_day.get(d, 0) for d in range(day + 1)),
                           "scope": scope, "task": task, "ne": ne, "auc": m[f"auc/{key}"],
                           "calibration": m.get(f"calibration/{key}", math.nan)}
                    for ref, rm in refs[scope].items():
                        row[f"ne_{ref}"] = rm[f"ne/{key}"]
                        b = baseline.get(task) if scope != "all" else None
                        row[f"share_{ref}"] = ((b - ne) / (b - rm[f"ne/{key}"])
                                               if b is not None else math.nan)
                    row["ne_baseline"] = baseline.get(task, math.nan) if scope != "all" \
                        else math.nan
                    out.append(row)
    return out


def baseline_ne(run: Path, world: int, domain: str) -> dict[str, float]:
    """The labels-only student's NE per task (mean over seeds) at lag 0 of ``world``: from
    results.csv, or while the run is still going from the finished runs in runs.jsonl (the
    last line of each seed)."""
    rd = RunDir(run)
    if (rd / RunDir.RESULTS).is_file():
        r = rd.results()
        r = r[(r.variant == BASELINE) & (r.domain == domain) & (r.teacher_lag_days == 0)
              & (r.world == world)]
        if len(r):
            return r.groupby("task")["ne"].mean().to_dict()
    by_seed = {f.seed: f.record["metrics"] for f in rd.final_runs()
               if f.variant == BASELINE and f.lag == 0 and f.world in (None, world)}
    tasks = {k.split("/")[1] for m in by_seed.values() for k in m if k.startswith("ne/")}
    return {t: float(np.mean([m[f"ne/{t}/{domain}"] for m in by_seed.values()]))
            for t in sorted(tasks)} if by_seed else {}


def log_trend(frame: pd.DataFrame, col: str) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``col`` against log2(days seen) over the second
    half of the curve (where a flattening shows)."""
    f = frame.sort_values("days_seen")
    f = f[f.days_seen >= f.days_seen.max() / 2]
    if len(f) < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(np.log2(f.days_seen.to_numpy()), f[col].to_numpy(), 1)
    return float(slope), float(intercept)


def summarize(rows: pd.DataFrame, domain: str, task: str) -> dict[str, Any]:
    """Mean curves over worlds, GEM − MLP paired per world at the last day, the log trends."""
    s = rows[(rows.scope == domain) & (rows.task == task)]
    curve = (s.groupby(["model", "days_seen"])
             [["ne", "auc", "share_oracle", "share_feature_oracle", "rows_seen"]]
             .mean().reset_index())
    out: dict[str, Any] = {"curve": curve.to_dict("records")}
    last = s[s.days_seen == s.days_seen.max()].pivot_table(index="world", columns="model",
                                                           values="ne")
    if {"gem", "mlp"} <= set(last.columns):
        d = (last["mlp"] - last["gem"]).dropna()
        std = float(d.std(ddof=1)) if len(d) > 1 else math.nan
        out["mlp_minus_gem"] = {"per_world": d.to_dict(), "mean": float(d.mean()), "std": std,
                                "holds": bool(len(d) > 1 and d.mean() > 2 * std)}
    trends = {}
    for model, c in curve.groupby("model"):
        t = {"ne_per_doubling": log_trend(c, "ne")[0]}
        for ref, target in TARGETS.items():
            slope, icpt = log_trend(c, f"share_{ref}")
            t[f"share_{ref}_per_doubling"] = slope
            t[f"days_to_{ref}_target"] = (float(2 ** ((target - icpt) / slope))
                                          if slope and slope > 0 else math.nan)
        trends[model] = t
    out["trends"] = trends
    return out


def markdown(summary: dict[str, Any], domain: str, task: str) -> str:
    curve = pd.DataFrame(summary["curve"])
    models = sorted(curve.model.unique())
    lines = [f"Teacher NE on the evaluation days ({domain}, {task}; mean over worlds) and its "
             "share of the labels-only student's gap to the oracle / feature oracle:", "",
             "| days seen | rows seen | " + " | ".join(
                 f"{m} NE | {m} share (oracle) | {m} share (feature oracle)" for m in models)
             + " |", "|" + "---:|" * (2 + 3 * len(models))]
    for days, g in curve.groupby("days_seen"):
        g = g.set_index("model")
        cells = []
        for m in models:
            if m in g.index:
                r = g.loc[m]
                cells += [f"{r['ne']:.4f}", f"{100 * r['share_oracle']:.1f} %",
                          f"{100 * r['share_feature_oracle']:.1f} %"]
            else:
                cells += ["—"] * 3
        lines.append(f"| {days} | {g.rows_seen.iloc[0]:,.0f} | " + " | ".join(cells) + " |")
    d = summary.get("mlp_minus_gem")
    if d:
        per = ", ".join(f"world {w}: {v:+.4f}" for w, v in d["per_world"].items())
        lines += ["", f"MLP − GEM NE at the last day, paired per world: {d['mean']:+.4f} ± "
                      f"{d['std']:.4f} ({per}); "
                      + ("holds (> 2 std)." if d["holds"] else "does not hold (≤ 2 std).")]
    for m, t in summary["trends"].items():
        lines.append(f"- {m}: NE {t['ne_per_doubling']:+.4f} per doubling of the days (second "
                     f"half); oracle-gap share {100 * t['share_oracle_per_doubling']:+.1f} "
                     f"points per doubling, feature-oracle share "
                     f"{100 * t['share_feature_oracle_per_doubling']:+.1f}; the log-linear trend "
                     f"reaches 40 % / 60 % at ~{_days(t['days_to_oracle_target'])} / "
                     f"~{_days(t['days_to_feature_oracle_target'])} days")
    return "\n".join(lines) + "\n"


def _days(x: float) -> str:
    return "never (flat or falling)" if not math.isfinite(x) else f"{x:,.0f}"


def plots(rows: pd.DataFrame, domain: str, task: str, folder: Path) -> list[Path]:
    """``teacher_scaling.png`` (NE vs days) and ``teacher_headroom.png`` (shares vs days)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    s = rows[(rows.scope == domain) & (rows.task == task)]
    written = []
    for name, cols, ylabel in (
            ("teacher_scaling.png", ["ne"], f"NE ({domain}, {task}, evaluation days)"),
            ("teacher_headroom.png", ["share_oracle", "share_feature_oracle"],
             "share of the baseline's gap closed")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for model, g in s.groupby("model"):
            for col in cols:
                mean = g.groupby("days_seen")[col].mean()
                label = model if len(cols) == 1 else f"{model}: {col.removeprefix('share_')}"
                ax.plot(mean.index, mean.values, marker="o", label=label)
                for _, w in g.groupby("world"):
                    ax.plot(w.days_seen, w[col], alpha=0.2, color=ax.lines[-1].get_color())
        ax.set_xscale("log", base=2)
        ax.set_xlabel("days of data the teacher has seen (streaming checkpoints)")
        ax.set_ylabel(ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        written.append(folder / name)
    return written


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True, type=Path, help="a gemkd run dir (streaming spec)")
    p.add_argument("--every", type=int, default=3, help="score every N-th day's checkpoint")
    p.add_argument("--models", nargs="+", default=["gem", "mlp"], choices=["gem", "mlp"])
    p.add_argument("--mlp-config", default="mlp_small")
    p.add_argument("--worlds", nargs="*", type=int, default=None, help="default: all")
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument("--plots", type=Path, default=None, help="folder for the two PNGs")
    add_common_args(p)
    args = p.parse_args(argv)
    apply_common_args(p, args)
    spec = RunDir(args.run).spec()
    if spec is None:
        p.error(f"--run {args.run}: no spec.yaml (not a gemkd run directory)")
    domain, task = spec["student_domain"], spec["student_tasks"][0]
    rows, seconds = [], {}
    for world in find_worlds(args.run):
        if args.worlds is not None and world.seed not in args.worlds:
            continue
        runs = {}
        if "gem" in args.models:
            runs["gem"] = world.run
        if "mlp" in args.models:
            t0 = time.perf_counter()
            runs["mlp"] = fit_mlp(world, args.run / "scaling" / f"mlp-w{world.seed}",
                                  args.mlp_config)
            seconds[f"mlp fit w{world.seed}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows += scores(world, spec, runs, args.every,
                       baseline_ne(args.run, world.seed, domain))
        seconds[f"scoring w{world.seed}"] = time.perf_counter() - t0
        print(f"world {world.seed}: scored {', '.join(runs)}", flush=True)
    frame = pd.DataFrame(rows)
    summary = summarize(frame, domain, task)
    text = markdown(summary, domain, task)
    print(text)
    result = {"machine": machine(), "command": command(), "seconds": seconds,
              "rows": frame.to_dict("records"), "summary": summary,
              "config": {"run": str(args.run), "every": args.every, "mlp": args.mlp_config}}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=float))
    if args.markdown:
        args.markdown.write_text(text)
    if args.plots:
        for path in plots(frame, domain, task, args.plots):
            print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()

"""The NE check for a streaming-teacher recipe change: does a faster recipe learn as well?

    python -m benchmarks.teacher_stream_ne --data DATA [--days 12] [--eval-days 2]
        [--seeds 0 1] [--candidate NAME:key=value,...] [--json OUT] [--threads N]

Each candidate (:mod:`benchmarks.bench_teacher_stream`'s: ``before``, the recipe before issue
29, and ``after``, the benchmark's shipped streaming teacher, always; ``--candidate`` adds more)
streams days ``[0, days)`` of ``DATA`` in time order, one seed at a time, and is evaluated on
the following ``eval-days`` days: NE per task (all domains), the seed mean and the seed spread
(max - min). A speed-up is shipped as the default only when its NE is within the seed spread
of ``before``'s.
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

from benchmarks.bench_teacher_stream import callbacks_of, describe, recipes
from benchmarks.common import apply_common_args, quiet_lightning, write_json
from gemkd.experiments.teacher.teacher_fit import fit_teacher


def ne_of(summary: dict[str, Any]) -> dict[str, float]:
    """``{task: NE}`` over all domains from a fit's summary (its final validation)."""
    val = summary.get("val", {})
    return {k.split("/")[1]: float(v) for k, v in val.items()
            if k.startswith("ne/") and k.endswith("/all")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="dataset directory")
    p.add_argument("--days", type=int, default=12, help="stream days [0, DAYS)")
    p.add_argument("--eval-days", type=int, default=2, help="evaluate on the days after")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--candidate", action="append", default=[],
                   help="NAME:key=value[,key=value]: also check small with these config keys")
    p.add_argument("--only", action="append", default=None,
                   help="check only these candidates (repeatable; default: all)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    apply_common_args(p, args)
    quiet_lightning()
    candidates = recipes(p, args.candidate)
    if args.only:
        candidates = {k: v for k, v in candidates.items() if k in args.only}
    days = [0, args.days]
    evals = [args.days, args.days + args.eval_days]
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in candidates}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name, c in candidates.items():
                cfg = dataclasses.replace(c.config, train_days=days, val_days=evals, seed=seed)
                t0 = time.perf_counter()
                summary = fit_teacher(cfg, args.data, Path(tmp) / f"{name}-{seed}",
                                      stream=True, progress=False, callbacks=callbacks_of(c))
                row = {"seed": seed, "ne": ne_of(summary),
                       "seconds": round(time.perf_counter() - t0, 1),
                       "steps": summary["global_step"]}
                rows[name].append(row)
                print(f"  {name} seed {seed}: NE {row['ne']}, {row['seconds']} s, "
                      f"{row['steps']} steps", flush=True)
    summary_out: dict[str, Any] = {}
    for name, rs in rows.items():
        tasks = list(rs[0]["ne"])
        summary_out[name] = {t: {"mean": round(statistics.fmean(r["ne"][t] for r in rs), 5),
                                 "spread": round(max(r["ne"][t] for r in rs)
                                                 - min(r["ne"][t] for r in rs), 5)}
                             for t in tasks}
        print(f"{name}: " + ", ".join(f"{t} NE {v['mean']:.4f} (seed spread {v['spread']:.4f})"
                                      for t, v in summary_out[name].items()))
    write_json(args.json, {"bench": "teacher_stream_ne", "data": str(args.data),
                           "train_days": days, "eval_days": evals, "seeds": args.seeds,
                           "candidates": {k: describe(c) for k, c in candidates.items()},
                           "runs": rows, "summary": summary_out})


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()

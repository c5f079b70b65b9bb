"""Time of a run's intervals (gemkd.experiments.report.intervals) at the benchmark's size.

A run directory of synthetic per-user evaluation files — 3 worlds × 7 variants × 3 seeds plus
the GEM teacher, 5,000 users in 3 domains, 2 tasks, one teacher lag — with a results.csv whose
NE matches them, then ``run_intervals`` with 1,000 resamples, timed end to end (reading the
files, checking them against results.csv, the bootstrap, the table). ``--method t`` (the
default) needs no resamples with several worlds (a t interval over them) and the
users' resamples only with one; ``--method percentile`` times the nested bootstrap of earlier
versions (benchmarks/percentile_rule.py) on the same files.
Accuracy (false verdicts, coverage) is benchmarks/null_calibration.py's. Usage::

    python -m benchmarks.bench_intervals [--users 5000] [--worlds 3] [--samples 1000]
                                         [--method t|percentile]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.percentile_rule import NAME, run_table
from gemkd.experiments.report.cluster_files import load_eval_sets, point_frame
from gemkd.experiments.report.intervals import run_intervals
from gemkd.experiments.run_dir import RunDir

VARIANTS = ("baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr", "hierarchical", "full")
TASKS, DOMAINS = ("click", "conversion"), ("d0", "d1", "d2")


def write_run(root: Path, users: int, worlds: int, seeds: int, samples: int) -> None:
    rng = np.random.default_rng(0)
    run = RunDir(root)
    for world in range(worlds):
        user = np.repeat(np.arange(users), 3)
        domain = np.tile(np.arange(3), users)
        keep = rng.random(user.size) < 0.7  # ~2.1 domains per user
        user, domain = user[keep], domain[keep]
        n = rng.integers(1, 30, (user.size, 2)).astype(float)
        pos = np.floor(n * rng.random((user.size, 2)) * 0.4)
        names = ["teacher__gem"] + [f"{v}__seed{s}" for v in VARIANTS for s in range(seeds)]
        run.clusters_path(world, 0, names[0]).parent.mkdir(parents=True)
        for name in names:
            np.savez(run.clusters_path(world, 0, name), user_id=user, domain=domain, n=n, pos=pos,
                     loss=n * (0.5 + 0.1 * rng.random(n.shape)), tasks=np.array(TASKS),
                     domains=np.array(DOMAINS), base_rate=np.array([0.2, np.nan]))
    results = point_frame(load_eval_sets(root))
    for col in ("auc", "calibration", "ne_baseline", "ne_teacher", "ne_oracle", "delta_ne",
                "transfer_ratio", "efficiency_vs_kd"):
        results[col] = 0.0
    run.write_results(results)
    run.write_spec({"bootstrap": {"samples": samples, "seed": 0}})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=5000)
    p.add_argument("--worlds", type=int, default=3)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--method", choices=("t", NAME), default="t")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_run(root, args.users, args.worlds, args.seeds, args.samples)
        t0 = time.perf_counter()
        if args.method == NAME:
            rows, kind = len(run_table(root)), NAME
        else:
            iv = run_intervals(root)
            rows, kind = len(iv.table), iv.interval_method
        seconds = time.perf_counter() - t0
    print(f"{args.worlds} worlds × {len(VARIANTS)} variants × {args.seeds} seeds × "
          f"{args.users} users × {len(TASKS)} tasks × {args.samples} resamples: "
          f"{seconds:.2f} s ({rows} interval rows, {kind})")


if __name__ == "__main__":
    main()

"""A/A and known-effect calibration of the report's intervals: the percentile rule of earlier
versions against today's t / generalized-pivot rule.

Simulated runs (gemkd.transfer.metrics.null_sim: per-user sums drawn like a run's clusters/
files, with user, seed and per-world noise) go through the report's own interval code
(gemkd.experiments.report.intervals.lag_tables), once with the rule of earlier versions
(``percentile``: the nested percentile bootstrap and a majority of worlds,
benchmarks/percentile_rule.py) and once with the report's t / generalized-pivot rule (``t``).
For each run shape the project ships (one world × 3 seeds: quickstart, MovieLens, KuaiRand;
3 worlds × 3 seeds: today's benchmark; 8 × 3: the planned one) and each noise mix it prints,
per rule: the false-verdict rate of two null comparisons (a placebo against the baseline, a twin
of KD against KD; split by side) and the coverage of two known effects (KD's ΔNE, 0.01; a
variant 0.004 better than KD), with their Monte-Carlo standard errors. Usage::

    python -m benchmarks.null_calibration [--replicates 10000] [--old-replicates 2000]
                                          [--samples 1000] [--shapes 1x3,3x3,8x3]
"""

from __future__ import annotations

import argparse
import math
import time

import pandas as pd

from benchmarks.percentile_rule import PERCENTILE
from gemkd.experiments.report.cluster_files import EvalSet
from gemkd.experiments.report.intervals import lag_tables
from gemkd.transfer.metrics.null_sim import (
    EFFECTS_KNOWN,
    NOISE_MIXES,
    NULLS,
    Scenario,
    SimWorld,
    draw_run,
    rate_se,
    score,
)

MIXES = NOISE_MIXES


def eval_sets(worlds: list[SimWorld]) -> list[EvalSet]:
    """The simulated worlds as the report reads them: each replicate a "task"."""
    tasks = [f"r{i}" for i in range(worlds[0].sums.n_tasks)]
    return [EvalSet(w.world, 0, tasks, ["all"], w.students, w.teachers, w.sums)
            for w in worlds]


def simulate(scenario: Scenario, replicates: int, method: str, samples: int,
             chunk: int) -> pd.DataFrame:
    """The interval table over ``replicates`` runs, drawn and scored ``chunk`` at a time, under
    ``method`` ("t": the report's rule; "percentile": the rule of earlier versions)."""
    rule = PERCENTILE if method == "percentile" else None
    parts = []
    for k, start in enumerate(range(0, replicates, chunk)):
        n = min(chunk, replicates - start)
        sets = eval_sets(draw_run(scenario, n, seed=k))
        table, _ = lag_tables(sets, samples, k, [(0.95, "kd")], rule)[0]
        parts.append(table)
    return pd.concat(parts, ignore_index=True)


def rates(table: pd.DataFrame, scenario: Scenario) -> dict[str, object]:
    """False-verdict rates of the nulls and coverage of the known effects."""
    row: dict[str, object] = {}
    for kind, pairs in (("null", NULLS), ("effect", EFFECTS_KNOWN)):
        for variant, reference in pairs:
            col = "delta_ne" if reference == "baseline" else "vs_kd"
            t = table[table["variant"] == variant]
            r = score(t[f"{col}_lo"], t[f"{col}_hi"], scenario.truth(variant, reference),
                      t[f"{col}_p"])
            name = f"{variant}−{reference}"
            if kind == "null":
                row[f"false {name} (hi/lo)"] = (f"{100 * r.miss:5.1f} % "
                                                f"({100 * r.above:.1f}/{100 * r.below:.1f})")
                row[f"p≤1 % {name}"] = (f"{100 * r.p_at_1pct:.2f} %"
                                         if math.isfinite(r.p_at_1pct) else "—")
            else:
                row[f"cover {name}"] = f"{100 * r.coverage:5.1f} %"
    return row


def markdown(df: pd.DataFrame) -> str:
    """A GitHub table of ``df`` (no tabulate dependency)."""
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(map(str, r)) + " |" for r in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicates", type=int, default=10000, help="runs per cell, new rule")
    p.add_argument("--old-replicates", type=int, default=2000, help="runs per cell, old rule")
    p.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--shapes", default="1x3,3x3,8x3", help="worlds x seeds, comma-separated")
    args = p.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        worlds, seeds = (int(x) for x in shape.split("x"))
        for mix, noise in MIXES.items():
            if mix == "search" and worlds == 1:
                continue  # one world: its own search draw is its truth, not noise
            scenario = Scenario(f"{shape}-{mix}", worlds, seeds, **noise)
            for method, n in (("percentile", args.old_replicates), ("t", args.replicates)):
                if n < 1:
                    continue  # --old-replicates 0: the report's rule alone
                t0 = time.perf_counter()
                boot = method == "percentile" or worlds == 1  # t over worlds needs no resamples
                chunk = max(10, 30_000_000 // (args.samples * worlds * 10)) if boot else 2000
                table = simulate(scenario, n, method, args.samples, chunk)
                rows.append({"shape": shape, "noise": mix, "rule": method, "runs": n,
                             **rates(table, scenario),
                             "seconds": f"{time.perf_counter() - t0:.0f}"})
                print(" | ".join(str(v) for v in rows[-1].values()), flush=True)
    print()
    print(markdown(pd.DataFrame(rows)))
    for n in sorted({args.replicates, args.old_replicates} - {0}):
        print(f"Monte-Carlo SE at {n} runs: a 5 % rate ±{100 * rate_se(0.05, n):.2f} pt, "
              f"2.5 % ±{100 * rate_se(0.025, n):.2f} pt")


if __name__ == "__main__":
    main()

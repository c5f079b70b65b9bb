"""Any two variants of a finished run compared at every lag with the report's own intervals
(e.g. the Student Adapter's own gain under each KD target, SOLARIS against the LoopFM codes).

    python -m studies.pairwise --run runs/benchmark --pair "kd_adapter_cal vs kd_cal" \\
        --pair "kd_aux_adapter vs kd_aux" [--task click] [--domain stories] [--markdown OUT.md]

Why: the report compares every variant with plain KD (and a primary family with what the spec
names, at one lag); an adapter's own gain is a difference between two other variants, and it is
read at every teacher lag. Each pair "A vs B" is ΔNE(A) − ΔNE(B) = NE(B) − NE(A) from
:func:`gemkd.experiments.report.intervals.lag_intervals` with B as the reference: the same
paired, user-level resamples, seeds and worlds as the report's, at 95 % and unadjusted (an
exploratory reading, not a primary verdict), with the worlds agreeing on the sign.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.intervals import bootstrap_settings, lag_intervals
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.primary import parse_comparison

COLUMNS = ["pair", "teacher_lag_days", "domain", "task", "diff", "lo", "hi", "verdict",
           "worlds_agree", "n_worlds"]


def compare(run_dir: Path, pairs: list[str], task: str | None = None,
            domain: str | None = None) -> pd.DataFrame:
    """One row per pair × lag (× domain × task unless narrowed to one)."""
    run = RunDir(run_dir)
    samples, seed = bootstrap_settings(run.spec())
    sets = load_eval_sets(run)
    rows = []
    for text in pairs:
        a, b = parse_comparison(text, "--pair")
        for lag in sorted({s.lag for s in sets}):
            table, _ = lag_intervals([s for s in sets if s.lag == lag], samples, seed,
                                     reference=b)
            t = table[table["variant"] == a]
            if task is not None:
                t = t[t["task"] == task]
            if domain is not None:
                t = t[t["domain"] == domain]
            if t.empty:
                raise SystemExit(f"{run_dir}: no {a!r} rows at lag {lag} (variants there: "
                                 f"{sorted(set(table['variant']))})")
            for r in t.itertuples():
                verdict = ("A above B" if r.vs_kd_lo > 0 else "A below B" if r.vs_kd_hi < 0
                           else "not resolved")
                rows.append(dict(pair=text, teacher_lag_days=lag, domain=r.domain, task=r.task,
                                 diff=r.vs_kd, lo=r.vs_kd_lo, hi=r.vs_kd_hi, verdict=verdict,
                                 worlds_agree=r.worlds_agree_vs_kd, n_worlds=r.n_worlds))
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown(df: pd.DataFrame) -> str:
    lines = ["| pair | lag | domain | task | ΔNE(A) − ΔNE(B) [95 % CI] | reading "
             "| worlds agreeing |", "|---|---:|---|---|---:|---|---:|"]
    for r in df.itertuples():
        lines.append(f"| {r.pair} | {r.teacher_lag_days} | {r.domain} | {r.task} | "
                     f"{r.diff:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}] | {r.verdict} | "
                     f"{r.worlds_agree}/{r.n_worlds} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="a finished gemkd run directory")
    p.add_argument("--pair", action="append", required=True, help='"A vs B" (repeatable)')
    p.add_argument("--task", default=None, help="one task (default: every task)")
    p.add_argument("--domain", default=None, help="one domain (default: every domain and all)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    args = p.parse_args(argv)
    df = compare(args.run, args.pair, args.task, args.domain)
    text = markdown(df)
    print(text, end="")
    if args.markdown is not None:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()

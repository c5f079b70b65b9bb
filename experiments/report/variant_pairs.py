"""One variant against another (not only against plain KD): ΔNE(variant) − ΔNE(reference) =
NE(reference) − NE(variant) with the report's own intervals (the reference arm is an argument of
:func:`gemkd.experiments.report.intervals.lag_intervals`) — e.g. the Student Adapter's own gain,
kd_aux_adapter against kd_aux, or a variant against the labels-only baseline, per teacher lag."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from gemkd.experiments.report.cluster_files import has_clusters, load_eval_sets
from gemkd.experiments.report.intervals import bootstrap_settings, lag_intervals
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.errors import ConfigError

COLUMNS = ["teacher_lag_days", "domain", "task", "variant", "reference", "diff", "diff_lo",
           "diff_hi", "p", "verdict", "worlds_agree", "n_worlds", "per_world"]


def paired_difference(run_dir: str | Path, variant: str, reference: str,
                      level: float = 0.95) -> pd.DataFrame:
    """Per lag, domain and task: ``diff`` = ΔNE(variant) − ΔNE(reference) with its interval and
    two-sided p-value, the verdict (``beats <reference>`` / ``below <reference>``) and each
    world's own difference. A ConfigError when the two cannot be compared anywhere (no
    per-user files, an unknown name, a variant against itself, no cell with both)."""
    run_dir = Path(run_dir)
    if not has_clusters(run_dir):
        raise ConfigError(f"{run_dir}: no clusters/ folder (per-user evaluation files): a run "
                          "made before per-user evaluation files has no intervals")
    if variant == reference:
        raise ConfigError(f"--pair {variant} {reference}: a variant against itself is 0 by "
                          "construction; name two different variants")
    sets = load_eval_sets(run_dir)
    names = {v for es in sets for v, _ in es.students}
    for name in (variant, reference):
        if name not in names:
            raise ConfigError(f"{run_dir}: no variant {name!r} (variants: "
                              f"{', '.join(sorted(names))})")
    samples, seed = bootstrap_settings(RunDir(run_dir).spec())
    rows = []
    for lag in sorted({es.lag for es in sets}):
        table, by_world = lag_intervals([es for es in sets if es.lag == lag], samples, seed,
                                        level, reference=reference)
        for _, r in table[table["variant"] == variant].iterrows():
            w = by_world[(by_world["variant"] == variant) & (by_world["domain"] == r["domain"])
                         & (by_world["task"] == r["task"])]
            rows.append({"teacher_lag_days": lag, "domain": r["domain"], "task": r["task"],
                         "variant": variant, "reference": reference, "diff": r["vs_kd"],
                         "diff_lo": r["vs_kd_lo"], "diff_hi": r["vs_kd_hi"], "p": r["vs_kd_p"],
                         "verdict": r["kd_verdict"], "worlds_agree": r["worlds_agree_vs_kd"],
                         "n_worlds": r["n_worlds"],
                         "per_world": dict(zip(w["world"], w["vs_kd"], strict=True))})
    table = pd.DataFrame(rows, columns=COLUMNS)
    if not table["diff"].map(_finite).any():
        raise ConfigError(f"{run_dir}: cannot compare {variant} with {reference}: no lag, "
                          "domain and task has both evaluated on the same users")
    return table


def comparable(r: pd.Series) -> bool:
    """Does the row have a difference and an interval (a verdict means something)?"""
    return all(_finite(r[k]) for k in ("diff", "diff_lo", "diff_hi"))


def pair_lines(table: pd.DataFrame) -> Iterator[str]:
    """The lines ``gemkd report --pair`` prints, one per row; a row without an interval says
    it cannot be compared (never a nan interval with a verdict), and after the lines a
    ConfigError names how many rows could not be (the command then exits non-zero)."""
    bad = 0
    for _, r in table.iterrows():
        head = (f"lag {r['teacher_lag_days']} {r['domain']} {r['task']}: {r['variant']} - "
                f"{r['reference']}")
        if not comparable(r):
            bad += 1
            yield (f"{head}: cannot compare (no interval: this cell lacks the worlds, seeds or "
                   "users that have both)")
            continue
        worlds = ", ".join(f"{w}: {d:+.4f}" for w, d in r["per_world"].items()
                           if _finite(d))
        p = f", p {r['p']:.3g}" if _finite(r["p"]) else ""
        # this interval is the 95 % unadjusted one, also where the pair is in the run's
        # primary family (report.md gives Holm's there): a resolved line is a lead, and says so
        kind = "" if r["verdict"] == "not resolved" else ", exploratory: 95 % unadjusted"
        yield (f"{head} ΔNE {r['diff']:+.4f} [{r['diff_lo']:+.4f}, {r['diff_hi']:+.4f}]{p} "
               f"{r['verdict']} (worlds {worlds}{kind})")
    if bad:
        raise ConfigError(f"{bad} of {len(table)} rows cannot be compared (no interval)")


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)

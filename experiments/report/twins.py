"""A/A twins (spec ``twins:``, DESIGN §6): copies of a variant under other names, each with its
own search draw (searches are seeded by variant name, lag and world), compared with their
original. Nothing separates a twin from its original but the search's draw and what the chosen
knobs change, so every resolved twin comparison is a false verdict: their share is the run's
own estimate of its false-verdict rate, beside the 5 % the intervals promise. Twins stay out of
the primary family and the headline except as this check."""

from __future__ import annotations

import math

import pandas as pd

from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.family import twins_of
from gemkd.experiments.report.intervals import UNRESOLVED, lag_tables
from gemkd.experiments.report.summary import RunView, f4, lag_str, md_table
from gemkd.experiments.run_dir.results_schema import KD

COLUMNS = ["twin", "original", "teacher_lag_days", "domain", "task", "diff", "lo", "hi",
           "verdict", "identical"]
#: A twin whose difference to its original and interval are both within this of 0 trained the
#: same models: its search chose the same knobs and the training seeds are shared.
SAME = 1e-12


def twin_table(run: RunView) -> pd.DataFrame:
    """:func:`twin_comparisons` of ``run``, computed once per RunView (the first paragraph and
    the twins section both read it) and kept on it."""
    if "_twin_table" not in run.__dict__:
        run.__dict__["_twin_table"] = twin_comparisons(run)
    return run.__dict__["_twin_table"]


def twin_comparisons(run: RunView) -> pd.DataFrame:
    """Each twin against its original per lag, domain and task: ΔNE(twin) − ΔNE(original) with
    its 95 % interval and verdict (none where the run has no intervals)."""
    twins = {t: o for t, o in twins_of(run.spec).items()
             if t in run.variants and o in run.variants}
    if not twins or not run.has_intervals:
        return pd.DataFrame(columns=COLUMNS)
    iv = run.intervals
    tables = {KD: iv.table}
    others = sorted({o for o in twins.values() if o != KD})
    if others:
        sets = load_eval_sets(run.dir)
        parts: dict[str, list[pd.DataFrame]] = {o: [] for o in others}
        for lag in run.lags:
            found = lag_tables([s for s in sets if s.lag == lag], iv.samples, iv.seed,
                               [(iv.level, o) for o in others])
            for o, (table, _) in zip(others, found, strict=True):
                parts[o].append(table)
        tables.update({o: pd.concat(p, ignore_index=True) for o, p in parts.items()})
    rows = []
    for twin, original in twins.items():
        t = tables[original]
        t = t[(t["variant"] == twin) & t["domain"].isin(run.domains)]
        for r in t.itertuples():
            identical = abs(r.vs_kd) < SAME and abs(r.vs_kd_hi - r.vs_kd_lo) < SAME
            rows.append(dict(twin=twin, original=original, teacher_lag_days=r.teacher_lag_days,
                             domain=r.domain, task=r.task, diff=r.vs_kd, lo=r.vs_kd_lo,
                             hi=r.vs_kd_hi, verdict=r.kd_verdict, identical=identical))
    return pd.DataFrame(rows, columns=COLUMNS)


def resolved(table: pd.DataFrame) -> pd.Series:
    """The rows of :func:`twin_comparisons`' table whose interval excludes 0: a comparison
    without an interval (an arm's evaluation files missing) is not resolved."""
    finite = table["lo"].map(_finite) & table["hi"].map(_finite)
    return (table["verdict"] != UNRESOLVED) & finite


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def twin_counts(table: pd.DataFrame) -> tuple[int, int]:
    """(comparisons, resolved ones) of :func:`twin_comparisons`' table."""
    return len(table), int(resolved(table).sum())


def twins_sentence(run: RunView) -> str:
    """The first paragraph's sentence on the twins (empty without any)."""
    table = twin_table(run)
    n, k = twin_counts(table)
    if not n:
        return ""
    return (f" A/A twins: {n} comparisons of a twin with its original (per task, lag and "
            f"domain), {k} resolved ({100 * k / n:.0f} %; at 95 % intervals about 5 % are "
            "expected when only noise separates them): this run's own estimate of its "
            "false-verdict rate (section A/A twins).")


def twins_section(run: RunView) -> list[str]:
    """The report's section on the twins: per twin, its comparisons and the resolved ones."""
    table = twin_table(run)
    n, k = twin_counts(table)
    if not n:
        return []
    rows = []
    for (twin, original), g in table.groupby(["twin", "original"], sort=False):
        bad = g[resolved(g)]
        listed = "; ".join(f"{r.task} {r.domain} lag {lag_str(r.teacher_lag_days)}: "
                           f"{f4(r.diff)} [{f4(r.lo)}, {f4(r.hi)}] {r.verdict}"
                           for r in bad.itertuples()) or "—"
        rows.append([twin, original, str(len(g)), str(len(bad)), str(int(g["identical"].sum())),
                     listed])
    rate = f"{100 * k / n:.0f} %" if n else "—"
    text = (f"Each twin is its original under another name (the same methods and teacher), "
            "with its own search draw; ΔNE(twin) − ΔNE(original) with its 95 % interval, per "
            f"task, teacher lag and domain. {k} of {n} comparisons are resolved ({rate}): every "
            "one of them is a false verdict, so this is the run's own estimate of how often a "
            "single unadjusted comparison misleads (the intervals promise 5 %).")
    same = int(table["identical"].sum())
    if same:
        text += (f" {same} of them are identical to their original: its search chose the "
                 "same knobs, and the shared training seeds then train the same models.")
    if any(not math.isfinite(x) for x in table["lo"]):
        text += " A comparison without an interval counts as not resolved."
    return ["## A/A twins", "", text, "",
            md_table(("twin", "original", "comparisons", "resolved", "identical",
                      "resolved ones"), rows, left=2), ""]

"""The teacher first (DESIGN §6): is the GEM teacher better than the labels-only student on the
same evaluation users? A report whose teacher was worse (NE 1.04 against the baseline's 0.66)
still opened with "kd_aux beats plain KD"; a gain over the baseline there is not the teacher's
knowledge reaching the student, and the reader has to know that before any verdict.

The teacher (``clusters/…/teacher__gem.npz``) is an arm on the same users, so NE(teacher) −
NE(baseline) gets its interval from the same machinery as every difference
(:mod:`gemkd.experiments.report.intervals`: columns ``teacher_vs_baseline*``)."""

from __future__ import annotations

import math

import pandas as pd

from gemkd.experiments.report.summary import RunView, ci


def teacher_row(run: RunView) -> pd.Series | None:
    """An interval row of the family's slice (the main one without a family): every row holds
    the teacher's NE and NE(teacher) − NE(baseline); None when there is no such row."""
    fam = run.family
    where = {} if fam is None else {"lag": fam.lag, "task": fam.task, "domain": fam.domain}
    rows = run.interval_rows(**where)
    return None if rows.empty else rows.iloc[0]


def teacher_better(run: RunView) -> bool | None:
    """True when NE(teacher) − NE(baseline)'s interval lies below 0, False when it does not,
    None when it is unknown (no intervals, no teacher file, no baseline)."""
    if not run.has_intervals:
        return None
    r = teacher_row(run)
    if r is None:
        return None
    lo, hi = r["teacher_vs_baseline_lo"], r["teacher_vs_baseline_hi"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return bool(hi < 0)


def lower_unresolved(run: RunView) -> str | None:
    """``difference -0.0184 [-0.0373, 0.0006]`` when the teacher's NE is below the baseline's but
    the interval holds 0 (not better by the rule, yet not worse: words such as "worse
    probabilities" or "none of it is its knowledge" would read the point the wrong way); None
    otherwise."""
    if teacher_better(run) is not False:
        return None
    r = teacher_row(run)
    assert r is not None  # teacher_better found it
    d = r["teacher_vs_baseline"]
    if not (math.isfinite(d) and d < 0):
        return None
    return f"difference {ci(d, r['teacher_vs_baseline_lo'], r['teacher_vs_baseline_hi'])}"

"""The knobs tuning tried and chose, in a form a reader can take in (report.md's tuning table,
docs/results/RESULTS.md's "Tuned knobs" line).

Why: a search draws tens of values per knob at full float precision, and a replicated run makes
one choice per study (teacher lag × world). Listed raw, the table ran to thousands of characters
a row and the chosen values of different worlds read as one list. Here a searched knob shows its
range and trial count, a short list its values, and each choice is labelled with its study
wherever a run has more than one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

#: a knob with at most this many distinct tried values lists them; more shows their range
MAX_LISTED = 6


def fmt_knob(value: object) -> str:
    """A knob's value in 4 significant digits (an integer knob as an integer; text as is)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def with_study_columns(tuning: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``teacher_lag_days`` and ``world`` (nan where a run has none)."""
    df = tuning.copy()
    for col in ("teacher_lag_days", "world"):
        if col not in df.columns:
            df[col] = math.nan
    return df


def study_label(lag: object, world: object, by_lag: bool, by_world: bool) -> str:
    """``lag L, world W`` (each part only when asked for)."""
    parts = ([f"lag {fmt_knob(lag)}"] if by_lag else []) + \
        ([f"world {fmt_knob(world)}"] if by_world else [])
    return ", ".join(parts)


def edge_text(at_edge: pd.Series) -> pd.Series:
    """``at_edge`` as text (``""`` for none): a tuning.csv with no edge reads it as all-nan
    floats."""
    return at_edge.astype(object).fillna("").astype(str)


def _varies(frame: pd.DataFrame, col: str) -> bool:
    return frame[col].nunique(dropna=True) > 1


def _trials(trials: int, studies: int) -> str:
    if studies <= 1:
        return f"{trials} trials"
    if trials % studies == 0:
        return f"{trials // studies} trials × {studies} studies"
    return f"{trials} trials in {studies} studies"


def tried_cell(values: pd.Series, trials: int, studies: int = 1) -> str:
    """What was tried: the distinct values when few, else their range and the trial count
    (``trials`` over all ``studies``)."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) <= MAX_LISTED:
        return ", ".join(fmt_knob(v) for v in distinct)
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.isna().any():
        return f"{len(distinct)} values over {_trials(trials, studies)}"
    return f"{fmt_knob(numeric.min())} – {fmt_knob(numeric.max())} " \
        f"({_trials(trials, studies)})"


def chosen_cell(chosen: pd.DataFrame, by_lag: bool, by_world: bool) -> str:
    """The chosen value of each study, labelled with its study when there are several."""
    chosen = chosen.drop_duplicates(["teacher_lag_days", "world"])
    if chosen.empty:
        return "—"
    if len(chosen) == 1 or not (by_lag or by_world):
        return ", ".join(dict.fromkeys(fmt_knob(v) for v in chosen["value"]))
    return "; ".join(
        f"{fmt_knob(r.value)} ({study_label(r.teacher_lag_days, r.world, by_lag, by_world)})"
        for r in chosen.itertuples())


def knob_rows(tuning: pd.DataFrame, variants: Iterable[str]) -> list[list[str]]:
    """``[variant, param, tried, chosen, val NE]`` per tuned knob; the val NE is the mean, over
    studies, of the chosen trial's validation NE."""
    df = with_study_columns(tuning)
    by_lag, by_world = _varies(df, "teacher_lag_days"), _varies(df, "world")
    rows = []
    for v in variants:
        tv = df[df["variant"] == v]
        for param in dict.fromkeys(tv["param"]):
            tp = tv[tv["param"] == param]
            trials = len(tp.drop_duplicates(["teacher_lag_days", "world", "trial"])) \
                if "trial" in tp.columns else len(tp)
            studies = len(tp.drop_duplicates(["teacher_lag_days", "world"]))
            chosen = tp[tp["chosen"].astype(bool)]
            per_study = chosen.drop_duplicates(["teacher_lag_days", "world"])["val_ne"]
            val_ne = f"{float(per_study.mean()):.4f}" if per_study.notna().any() else "—"
            rows.append([v, param, tried_cell(tp["value"], trials, studies),
                         chosen_cell(chosen, by_lag, by_world), val_ne])
    return rows


def tuned_line(tuning: pd.DataFrame | None, variants: Iterable[str], lag: int) -> str:
    """The knobs chosen at teacher lag ``lag``, per variant and, in a replicated run, per world:
    ``kd: alpha=0.8152, temperature=1.88 (world 0); alpha=… (world 1)``."""
    if tuning is None or tuning.empty:
        return "none"
    df = with_study_columns(tuning)
    df = df[df["chosen"].astype(bool)]
    if df["teacher_lag_days"].notna().any():
        df = df[df["teacher_lag_days"] == lag]
    by_world = _varies(df, "world")
    parts = []
    for v in variants:
        tv = df[df["variant"] == v]
        if tv.empty:
            continue
        studies = []
        for world, g in tv.groupby("world", sort=True, dropna=False):
            knobs = ", ".join(f"{r.param}={fmt_knob(r.value)}"
                              for r in g.drop_duplicates("param").itertuples())
            studies.append(f"{knobs} (world {fmt_knob(world)})" if by_world else knobs)
        parts.append(f"{v}: " + "; ".join(studies))
    return " · ".join(parts) or "none"

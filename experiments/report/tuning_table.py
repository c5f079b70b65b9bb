"""The knobs tuning tried and chose, in a form a reader can take in (report.md's tuning table and
"Tuned knobs" line, the tuned-knobs table beside docs/results/RESULTS.md).

Why: a search draws tens of values per knob at full float precision, and a replicated run makes
one choice per study (teacher lag × world × draw, a draw being one final seed's search under
``tuning.draws: per_seed``). Listed raw, the table ran to thousands of characters
a row and the chosen values of different worlds read as one list. Here a searched knob shows its
range and trial count, a short list its values, and each choice is labelled with its study
wherever a run has more than one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

#: a knob with at most this many distinct tried values lists them; more shows their range
MAX_LISTED = 6
#: the columns that name one study: a (teacher lag, world, draw)
STUDY = ["teacher_lag_days", "world", "draw"]


def fmt_knob(value: Any) -> str:
    """A knob's value in 4 significant digits (an integer knob as an integer; text as is)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def with_study_columns(tuning: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``teacher_lag_days``, ``world`` and ``draw`` (nan where a run has none: one
    world, or one search for every seed)."""
    df = tuning.copy()
    for col in STUDY:
        if col not in df.columns:
            df[col] = math.nan
    return df


def study_label(lag: object, world: object, by_lag: bool, by_world: bool,
                draw: object = None, by_draw: bool = False) -> str:
    """``lag L, world W, seed S`` (each part only when asked for; a draw is named by the final
    seed whose search it is)."""
    parts = ([f"lag {fmt_knob(lag)}"] if by_lag else []) + \
        ([f"world {fmt_knob(world)}"] if by_world else []) + \
        ([f"seed {fmt_knob(draw)}"] if by_draw else [])
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


def chosen_cell(chosen: pd.DataFrame, by_lag: bool, by_world: bool, by_draw: bool = False
                ) -> str:
    """The chosen value of each study, labelled with its study when there are several."""
    chosen = with_study_columns(chosen).drop_duplicates(STUDY)
    if chosen.empty:
        return "—"
    if len(chosen) == 1 or not (by_lag or by_world or by_draw):
        return ", ".join(dict.fromkeys(fmt_knob(v) for v in chosen["value"]))
    return "; ".join(
        f"{fmt_knob(r.value)} "
        f"({study_label(r.teacher_lag_days, r.world, by_lag, by_world, r.draw, by_draw)})"
        for r in chosen.itertuples())


def knob_rows(tuning: pd.DataFrame, variants: Iterable[str]) -> list[list[str]]:
    """``[variant, param, tried, chosen, val NE]`` per tuned knob; the val NE is the mean, over
    studies, of the chosen trial's validation NE."""
    df = with_study_columns(tuning)
    by_lag, by_world = _varies(df, "teacher_lag_days"), _varies(df, "world")
    by_draw = _varies(df, "draw")
    rows = []
    for v in variants:
        tv = df[df["variant"] == v]
        for param in dict.fromkeys(tv["param"]):
            tp = tv[tv["param"] == param]
            trials = len(tp.drop_duplicates([*STUDY, "trial"])) \
                if "trial" in tp.columns else len(tp)
            studies = len(tp.drop_duplicates(STUDY))
            chosen = tp[tp["chosen"].astype(bool)]
            per_study = chosen.drop_duplicates(STUDY)["val_ne"]
            val_ne = f"{float(per_study.mean()):.4f}" if per_study.notna().any() else "—"
            rows.append([v, param, tried_cell(tp["value"], trials, studies),
                         chosen_cell(chosen, by_lag, by_world, by_draw), val_ne])
    return rows


def _chosen_at(tuning: pd.DataFrame, lag: int) -> pd.DataFrame:
    """The chosen trials' rows at teacher lag ``lag`` (every row of a run without lags)."""
    df = with_study_columns(tuning)
    df = df[df["chosen"].astype(bool)]
    if df["teacher_lag_days"].notna().any():
        df = df[df["teacher_lag_days"] == lag]
    return df


def tuned_line(tuning: pd.DataFrame | None, variants: Iterable[str], lag: int) -> str:
    """The knobs chosen at teacher lag ``lag``, per variant and, in a replicated run, per world
    and per draw (a final seed's own search): ``kd: alpha=0.8152, temperature=1.88 (world 0,
    seed 0); alpha=… (world 0, seed 1)``."""
    if tuning is None or tuning.empty:
        return "none"
    df = _chosen_at(tuning, lag)
    by_world, by_draw = _varies(df, "world"), _varies(df, "draw")
    parts = []
    for v in variants:
        tv = df[df["variant"] == v]
        if tv.empty:
            continue
        studies = []
        for (world, draw), g in tv.groupby(["world", "draw"], sort=True, dropna=False):
            knobs = ", ".join(f"{r.param}={fmt_knob(r.value)}"
                              for r in g.drop_duplicates("param").itertuples())
            label = study_label(None, world, False, by_world, draw, by_draw)
            studies.append(f"{knobs} ({label})" if label else knobs)
        parts.append(f"{v}: " + "; ".join(studies))
    return " · ".join(parts) or "none"


def tuned_rows(tuning: pd.DataFrame | None, variants: Iterable[str], lag: int
               ) -> tuple[list[str], list[list[str]]]:
    """The knobs chosen at teacher lag ``lag`` as a table's header and rows: a row per variant
    and study (``world`` and ``seed`` columns only where a run has several worlds or draws), a
    column per knob in the variants' order, ``—`` where a variant has no such knob. No rows
    when nothing was tuned."""
    if tuning is None or tuning.empty:
        return [], []
    df = _chosen_at(tuning, lag)
    by_world, by_draw = _varies(df, "world"), _varies(df, "draw")
    variants = [v for v in variants if (df["variant"] == v).any()]
    params = list(dict.fromkeys(p for v in variants for p in df[df["variant"] == v]["param"]))
    header = ["variant", *(["world"] if by_world else []), *(["seed"] if by_draw else []),
              *params]
    rows = []
    for v in variants:
        tv = df[df["variant"] == v]
        for (world, draw), g in tv.groupby(["world", "draw"], sort=True, dropna=False):
            chosen = {r.param: fmt_knob(r.value) for r in g.drop_duplicates("param").itertuples()}
            rows.append([v, *([fmt_knob(world)] if by_world else []),
                         *([fmt_knob(draw)] if by_draw else []),
                         *(chosen.get(p, "—") for p in params)])
    return header, rows

"""What the report says about choices at the edge of their searched range (DESIGN §6 "Fair
comparison": a chosen value at a bound that is not a true limit of the knob is a defect of the
run — the optimum may lie outside — and the knob's range is the one to widen).

Not so when the search was flat: on a thin, signal-free log every trial of every study
validated at NE 1.0064-1.0069, and 18 bold "the knob to widen" lines chased the noise of which
trial happened to be lowest. A study whose best trial validates less than :data:`FLAT_NE`
below its median trial found no knob that mattered, and its edge choices are not reported as
knobs to widen; one sentence says so instead. Best against median, not the full span: one
diverged trial (a learning rate too high) widens the span without making the optimum's
neighbourhood any less flat. The threshold is absolute, 0.001 NE: it is the effect an ads team
acts on (~0.1 % relative, :data:`gemkd.experiments.report.sensitivity_text.ACTIONABLE` plans
for it), so a search whose choice gains less over a typical trial gives no reason to widen a
range; the run's own noise is no better yardstick, as one study's trials share their
validation rows. On the trial's log the best trial sat 0.00006-0.0006 below the median in all
70 studies; on a log with signal the searched knobs move validation NE by 0.01 or more."""

from __future__ import annotations

import pandas as pd

from gemkd.experiments.report.tuning_table import (
    STUDY,
    edge_text,
    fmt_knob,
    study_label,
    with_study_columns,
)


def edge_sentences(tuning: pd.DataFrame) -> list[str]:
    """One sentence per (variant, knob, side) whose chosen value sits at the edge of its range
    in at least one study (``tuning.csv`` rows with ``at_edge``), saying in how many of the
    variant's studies and with which values. Empty for a ``tuning.csv`` without the column (a
    run tuned by the older grid rule)."""
    need = {"variant", "teacher_lag_days", "param", "value", "chosen", "at_edge"}
    if tuning.empty or not need <= set(tuning.columns):
        return []
    df = with_study_columns(tuning)
    df["at_edge"] = edge_text(df["at_edge"])
    with_world, with_draw = df["world"].notna().any(), df["draw"].notna().any()
    key = STUDY
    studies = df.groupby("variant", sort=False)[key].apply(
        lambda g: len(g.drop_duplicates()))
    flat = _flat(df, key)
    chosen = df[df["chosen"].astype(bool) & df["at_edge"].isin(["low", "high"])]
    chosen_flat = chosen[_in(chosen, key, flat)]
    chosen = chosen[~_in(chosen, key, flat)]
    out = []
    for (variant, param, side), g in chosen.groupby(["variant", "param", "at_edge"], sort=False):
        g = g.drop_duplicates(key)
        where = "; ".join(f"{fmt_knob(r.value)} at "
                          + study_label(r.teacher_lag_days, r.world, True, with_world, r.draw,
                                        with_draw)
                          for r in g.itertuples())
        out.append(f"at_edge: {variant} chose {param} at the {side} end of its searched range "
                   f"in {len(g)} of {studies[variant]} studies ({where}): the knob to widen "
                   f"(spec tuning.{param}: {{low, high}} or a list reaching past it)")
    if not chosen_flat.empty:
        n = len(chosen_flat.drop_duplicates(["variant", *key]))
        out.append(f"no knob mattered in {n} search(es) whose choices sit at an edge: their best "
                   f"trial validated less than {FLAT_NE:g} NE below their median trial (less "
                   "than an ads team acts on), so which trial won is noise and no range needs "
                   "widening")
    return out


#: A study whose trials' validation NE spans less than this found no knob that mattered.
FLAT_NE = 1e-3


def _flat(df: pd.DataFrame, key: list[str]) -> set[tuple[object, ...]]:
    """The (variant, *study) keys whose best trial's validation NE is less than FLAT_NE below
    their median trial's (none without a ``val_ne`` column)."""
    if "val_ne" not in df.columns:
        return set()
    cols = ["variant", *key]
    trials = df.dropna(subset=["val_ne"])
    if "trial" in trials.columns:  # a row per knob of a trial: count each trial once
        trials = trials.drop_duplicates([*cols, "trial"])
    span = trials.groupby(cols, dropna=False)["val_ne"].agg(lambda v: v.median() - v.min())
    return {k for k, v in span.items() if v < FLAT_NE}


def _in(df: pd.DataFrame, key: list[str], keys: set[tuple[object, ...]]) -> pd.Series:
    """Whether each row's (variant, *study) is one of ``keys`` (nan compares equal to nan)."""
    def norm(t: tuple[object, ...]) -> tuple[object, ...]:
        return tuple("nan" if isinstance(x, float) and x != x else x for x in t)

    wanted = {norm(k) for k in keys}
    return pd.Series([norm(tuple(r)) in wanted for r in df[["variant", *key]].itertuples(
        index=False)], index=df.index, dtype=bool)

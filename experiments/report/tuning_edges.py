"""What the report says about choices at the edge of their searched range (DESIGN §6 "Fair
comparison": a chosen value at a bound that is not a true limit of the knob is a defect of the
run — the optimum may lie outside — and the knob's range is the one to widen)."""

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
    chosen = df[df["chosen"].astype(bool) & df["at_edge"].isin(["low", "high"])]
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
    return out

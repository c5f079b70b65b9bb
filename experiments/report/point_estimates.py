"""A run's interval tables without per-user evaluation files: results.csv's point estimates,
every interval NaN (what :func:`gemkd.experiments.report.intervals.run_intervals` falls back
to)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gemkd.experiments.report.interval_columns import COLUMNS, UNRESOLVED, WORLD_COLUMNS
from gemkd.experiments.report.table_names import WORLD
from gemkd.experiments.run_dir.results_schema import BASELINE, CELL_KEYS, KD


def from_results(results: pd.DataFrame, reference: str = KD
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run without per-user files: the same point estimates from results.csv, every interval
    column NaN and every verdict not resolved (seed spread on its own is no verdict)."""
    keys = list(CELL_KEYS)
    df = results.copy()
    df["fm"] = df["ne_baseline"] - df["ne_teacher"]
    per = (df.groupby([*keys, WORLD], sort=False)
           .agg(ne=("ne", "mean"), delta_ne=("delta_ne", "mean"), fm=("fm", "mean"),
                n_seeds=("seed", "nunique")).reset_index())
    cell = ["teacher_lag_days", "domain", "task", WORLD]
    kd = per[per["variant"] == reference].set_index(cell)["delta_ne"].rename("kd")
    per = per.join(kd, on=cell)
    per["vs_kd"] = per["delta_ne"] - per["kd"]
    per["efficiency_vs_kd"] = (per["delta_ne"] / per["kd"]).where(per["kd"] > 0)
    pooled = per.groupby(keys, sort=False)[["ne", "delta_ne", "fm", "kd", "vs_kd"]].mean()
    table = pooled.reset_index()
    table["efficiency_vs_kd"] = (table["delta_ne"] / table["kd"]).where(table["kd"] > 0)
    table["transfer_ratio"] = (table["delta_ne"] / table["fm"]).where(table["fm"] > 0)
    joined = per.merge(pooled[["delta_ne", "vs_kd"]].add_suffix("_pooled"), left_on=keys,
                       right_index=True, how="left")
    for col, name in (("delta_ne", "worlds_agree_delta_ne"), ("vs_kd", "worlds_agree_vs_kd")):
        same = np.sign(joined[col]) == np.sign(joined[f"{col}_pooled"])
        table[name] = same.groupby([joined[k] for k in keys], sort=False).sum().to_numpy()
    table["n_worlds"] = per.groupby(keys, sort=False)[WORLD].nunique().to_numpy()
    has_base = (per["variant"] == BASELINE).any()
    has_ref = (per["variant"] == reference).any()
    table["gain_verdict"] = np.where((table["variant"] == BASELINE) | (not has_base), "",
                                     UNRESOLVED)
    table["kd_verdict"] = np.where((table["variant"] == reference) | (not has_ref), "",
                                   UNRESOLVED)
    table = table.reindex(columns=COLUMNS)
    return table, per.reindex(columns=WORLD_COLUMNS)

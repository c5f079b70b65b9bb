"""The rows of ``results.csv``, from the ledger's finished student runs (``runs.jsonl``, written
and read by :class:`~gemkd.experiments.run_dir.RunDir`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pandas as pd

from gemkd.experiments.run_dir.results_schema import (
    ALL,
    BASELINE,
    KD,
    MATCH_KEYS,
    RESULT_COLUMNS,
    WORLD,
)

__all__ = ["RESULT_COLUMNS", "References", "derive", "rows_of"]


@dataclass(frozen=True)
class References:
    """What every result row of one (world, lag) is compared against, on the same evaluation
    data: GEM's metrics (``ne_teacher``, TR's reference), the oracle's and the feature oracle's
    (synthetic data; else empty), and the tasks and domains the rows cover. ``world`` is the
    synthetic world's seed (0 for real data)."""

    gem: dict
    oracle: dict
    feature: dict
    tasks: list[str]
    domains: list[str]
    world: int
    lag: int


def rows_of(variant: str, seed: int, res: dict, refs: References, source: dict) -> list[dict]:
    """One row per (task, domain) of a final run's record ``res``; ``source`` are the metrics
    of the teacher the variant learned from (``ne_source``: the domain FM for hierarchical
    transfer; empty for labels only)."""
    rows = []
    teacher, oracle, feature = refs.gem, refs.oracle, refs.feature
    world, lag = refs.world, refs.lag
    # a student of one domain: its rows under its name only (the pooled group would repeat
    # them as "all"); that domain may itself be named "all" (the importer's default)
    names = list(refs.domains) if len(refs.domains) == 1 else [*refs.domains, ALL]
    for task, domain in itertools.product(refs.tasks, names):
        m = res["metrics"]
        rows.append({
            "variant": variant, "seed": seed, WORLD: world, "domain": domain, "task": task,
            "teacher_lag_days": lag, "ne": m[f"ne/{task}/{domain}"],
            "auc": m.get(f"auc/{task}/{domain}", float("nan")),
            "calibration": m[f"calibration/{task}/{domain}"],
            "ne_teacher": teacher[f"ne/{task}/{domain}"],
            "ne_source": source.get(f"ne/{task}/{domain}", float("nan")),
            "ne_oracle": oracle.get(f"ne/{task}/{domain}", float("nan")),
            "ne_feature_oracle": feature.get(f"ne/{task}/{domain}", float("nan")),
            "train_seconds": res["train_seconds"],
            "examples_per_second": res["examples_per_second"],
            # the GEM teacher's AUC and calibration on the same rows (the report's teacher
            # diagnostics: an NE worse than the baseline's with a better AUC is miscalibration)
            "auc_teacher": teacher.get(f"auc/{task}/{domain}", float("nan")),
            "calibration_teacher": teacher.get(f"calibration/{task}/{domain}", float("nan")),
        })
    return rows


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """ne_baseline, ΔNE, TR and efficiency vs KD, matched on seed, domain, task and lag.

    TR is left empty where the teacher's own advantage ΔNE_FM = NE(baseline) − NE(teacher) is
    within 2 std of the baseline's seed noise (a ratio to noise means nothing); efficiency vs
    KD is left empty where plain KD does not gain."""
    if WORLD not in df.columns:  # rows of one world, from before worlds were replicated
        df = df.assign(**{WORLD: 0})
    keys = list(MATCH_KEYS)
    base = df[df.variant == BASELINE][keys + ["ne"]].rename(columns={"ne": "ne_baseline"})
    df = df.merge(base, on=keys, how="left")
    df["delta_ne"] = df["ne_baseline"] - df["ne"]
    fm = df["ne_baseline"] - df["ne_teacher"]
    df["transfer_ratio"] = (df["delta_ne"] / fm).where(_teacher_gains(df, fm))
    kd = df[df.variant == KD][keys + ["delta_ne"]].rename(columns={"delta_ne": "delta_kd"})
    df = df.merge(kd, on=keys, how="left")
    # a ratio to a KD gain that is not a gain means nothing: left empty (the report says so)
    df["efficiency_vs_kd"] = (df["delta_ne"] / df["delta_kd"]).where(df["delta_kd"] > 0)
    for col in ("auc_teacher", "calibration_teacher"):  # rows made before these were recorded
        if col not in df.columns:
            df[col] = float("nan")
    return df[RESULT_COLUMNS]


def _teacher_gains(df: pd.DataFrame, fm: pd.Series) -> pd.Series:
    """Per row: is the mean ΔNE_FM of its (domain, task, lag) cell above 2 std of the baseline's
    NE over seeds? True where one seed leaves the noise unknown."""
    cell = [WORLD, "domain", "task", "teacher_lag_days"]
    grouped = df.assign(fm=fm).groupby(cell)
    noise = grouped["ne_baseline"].transform(lambda s: s.drop_duplicates().std())
    mean_fm = grouped["fm"].transform("mean")
    return (mean_fm > 2 * noise) | noise.isna()

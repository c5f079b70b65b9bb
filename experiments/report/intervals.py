"""95 % intervals, p-values and verdicts per (teacher lag, domain, task, variant) of a run
(DESIGN §6).

"2 std over 3 training seeds on one world" flipped on a second world, so a verdict here needs an
interval that holds all three noises: training seeds, evaluation users, worlds — with the
degrees of freedom of the level that has few units (:mod:`gemkd.transfer.metrics.contrasts`):

* several worlds: a t interval over the worlds' paired, seed-averaged values (W − 1 df; each
  world's own users and seeds are inside its value's spread), never narrower than the
  fixed-effect interval from each world's own per-seed noise (three worlds whose means agree
  by chance would otherwise resolve a null: tests/transfer/metrics/test_null_calibration.py);
* one world: the users' variance from a paired user-level bootstrap
  (:mod:`gemkd.transfer.metrics.bootstrap`, one user draw for every arm and seed) plus the
  between-seed variance over S, the latter with its S − 1 df through a generalized pivot
  (Student's t when the seeds dominate, the normal when the users do; one seed: the users'
  variance only).

Point estimate: the mean over worlds of each world's mean over seeds. A verdict reads the
interval of a difference only: ΔNE = NE(baseline) − NE(variant) is a ``real gain`` (``real
loss``) when its interval lies above (below) 0; vs_kd = ΔNE − ΔNE(reference) =
NE(reference) − NE(variant) gives ``beats KD`` / ``below KD`` (the reference is plain KD unless
another is named). The verdict is the interval's, so it agrees with the two-sided p-value
(``delta_ne_p``, ``vs_kd_p``: below 1 − level exactly when resolved) that a family-wise
adjustment reads. The per-world sign counts are reported beside it and do not gate it
(the t interval already pays for few worlds;
tests/transfer/metrics/test_null_calibration.py holds the rates). A verdict is empty where the
row is its own reference or the reference is missing.
Ratios (efficiency = ΔNE / ΔNE(reference), TR = ΔNE / ΔNE_FM with ΔNE_FM = NE(baseline) −
NE(GEM teacher)) get Fieller's interval over the same variance, left empty unless the
denominator's interval lies above 0 (a ratio to noise means nothing); the efficiency interval
holds 1 exactly when vs_kd's holds 0. The GEM teacher is an arm on the same users: its NE and
NE(teacher) − NE(baseline) get intervals and a p-value the same way (``teacher_ne*``,
``teacher_vs_baseline*``), for the report's teacher-first sentence. :func:`lag_tables` gives the
tables at several levels and references from one set of user resamples: the primary family's
Holm-adjusted intervals (:mod:`gemkd.experiments.report.family`) and the twins' comparisons with
their originals.

The report has this one rule. :func:`lag_tables` takes another (:class:`IntervalRule`) for
comparison only: benchmarks/percentile_rule.py holds the rule of earlier versions (the
percentile interval of a bootstrap nested over worlds, users and seeds, and a majority of worlds),
which undercovers with 3 top-level units (benchmarks/null_calibration.py).

This module is the entry point (:func:`run_intervals`) and re-exports the parts' names. The
parts: :mod:`~gemkd.experiments.report.interval_columns` (the tables' columns and verdict
words), :mod:`~gemkd.experiments.report.lag_tables` (one lag's tables, :class:`IntervalRule`),
:func:`~gemkd.experiments.report.lag_tables.t_intervals` (the rule's maths) and
:mod:`~gemkd.experiments.report.world_arrays` (a world's arrays and the statistics); a run
without per-user files gets :func:`from_results`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import (
    EvalSet,
    has_clusters,
    load_eval_sets,
    point_frame,
)
from gemkd.experiments.report.interval_columns import (
    BEATS,
    BELOW,
    COLUMNS,
    GAIN,
    LOSS,
    METHOD_TEXT,
    UNRESOLVED,
    WORLD_COLUMNS,
    labels,
    verdict,
)
from gemkd.experiments.report.lag_tables import (
    Bounds,
    IntervalRule,
    interval_method,
    lag_intervals,
    lag_tables,
)
from gemkd.experiments.report.table_names import WORLD
from gemkd.experiments.report.world_arrays import USERS, WorldArrays, arm_stats
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import BASELINE, CELL_KEYS, KD
from gemkd.transfer.errors import ConfigError

__all__ = [
    "BEATS", "BELOW", "COLUMNS", "GAIN", "LOSS", "METHOD_TEXT", "TOLERANCE", "UNRESOLVED",
    "USERS", "WORLD_COLUMNS", "Bounds", "IntervalRule", "Intervals", "WorldArrays", "arm_stats",
    "bootstrap_settings", "check_against_results", "from_results", "interval_method", "labels",
    "lag_intervals", "lag_tables", "run_intervals", "verdict",
]

#: An error when the files' NE and results.csv's differ by more than this × max(1, NE): the same
#: data and sums, but the files' loss sums are float32 (they move NE by 6e-8 of itself at most).
TOLERANCE = 1e-6


@dataclass(frozen=True)
class Intervals:
    """``table``: one row per (lag, domain, task, variant), :data:`COLUMNS`; ``by_world``: each
    world's point estimates, :data:`WORLD_COLUMNS`; ``resolved``: False for a run without
    per-user evaluation files (its interval columns are NaN); ``interval_method``: a key of
    :data:`METHOD_TEXT` (several, comma-joined, if the lags differ); ``reference``: the arm
    vs_kd and efficiency are against."""

    table: pd.DataFrame
    by_world: pd.DataFrame
    samples: int
    seed: int
    worlds: list[int]
    resolved: bool
    level: float = 0.95
    interval_method: str = "t-worlds"
    reference: str = KD


def bootstrap_settings(spec: dict[str, Any] | None) -> tuple[int, int]:
    """(samples, seed) from spec.yaml's ``bootstrap`` (BootstrapSpec's defaults when absent)."""
    boot = (spec or {}).get("bootstrap") or {}
    return int(boot.get("samples", 1000)), int(boot.get("seed", 0))


def run_intervals(run_dir: str | Path, results: pd.DataFrame | None = None,
                  spec: dict[str, Any] | None = None, level: float = 0.95,
                  reference: str = KD) -> Intervals:
    """The intervals, p-values and verdicts of a run directory.

    Parameters
    ----------
    run_dir
        A ``gemkd run`` directory: its ``results.csv``, ``spec.yaml`` (the bootstrap's samples
        and seed) and, when the run kept them, the per-user evaluation files of ``clusters/``.
    results, spec
        The run's results table and spec mapping when the caller has read them already
        (None: read from ``run_dir``).
    level
        The intervals' coverage.
    reference
        The arm ``vs_kd`` and ``efficiency_vs_kd`` are against (plain KD by default).

    Returns
    -------
    Intervals
        One row per (lag, domain, task, variant) present in ``results`` and each world's
        point estimates; without per-user files the point estimates only (``resolved``
        False, every interval NaN, every verdict not resolved).

    Raises
    ------
    ConfigError
        A file is missing or unreadable, the per-user files' NE differs from results.csv's
        (they are not this run's evaluation), or the worlds' domains or tasks differ.
    """
    run = RunDir(run_dir)
    results = run.results() if results is None else results
    spec = run.spec() if spec is None else spec
    samples, seed = bootstrap_settings(spec)
    sets = load_eval_sets(run) if has_clusters(run) else []
    if not sets:
        table, by_world = from_results(results, reference)
        worlds = sorted(results[WORLD].unique().tolist())
        return Intervals(table, by_world, samples, seed, worlds, False, level, "none", reference)
    check_against_results(sets, results)
    lags = sorted({s.lag for s in sets})
    parts = [lag_intervals([s for s in sets if s.lag == lag], samples, seed, level, reference)
             for lag in lags]
    table = pd.concat([p[0] for p in parts], ignore_index=True)
    by_world = pd.concat([p[1] for p in parts], ignore_index=True)
    present = results[list(CELL_KEYS)].drop_duplicates()
    table = table.merge(present, on=list(CELL_KEYS), how="inner")[COLUMNS]
    by_world = by_world.merge(present, on=list(CELL_KEYS), how="inner")[WORLD_COLUMNS]
    worlds = sorted({s.world for s in sets})
    names = dict.fromkeys(interval_method([s for s in sets if s.lag == lag]) for lag in lags)
    return Intervals(table, by_world, samples, seed, worlds, True, level, ",".join(names),
                     reference)


def check_against_results(sets: list[EvalSet], results: pd.DataFrame) -> None:
    """The files' NE must be results.csv's: anything else means they are not the same run."""
    points = point_frame(sets)
    keys = [WORLD, "teacher_lag_days", "variant", "seed", "domain", "task"]
    both = points.merge(results[[*keys, "ne"]], on=keys, suffixes=("", "_results"))
    diff = (both["ne"] - both["ne_results"]).abs()
    bad = both[diff > TOLERANCE * both["ne_results"].abs().clip(lower=1.0)]
    if not bad.empty:
        r = bad.iloc[0]
        raise ConfigError(
            f"clusters/: NE from the per-user files differs from results.csv in {len(bad)} "
            f"row(s), e.g. variant={r['variant']} seed={r['seed']} world={r[WORLD]} "
            f"lag={r['teacher_lag_days']} {r['domain']}/{r['task']}: {r['ne']:.6f} vs "
            f"{r['ne_results']:.6f}; the files are not this run's evaluation")


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

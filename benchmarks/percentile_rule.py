"""The interval rule of earlier versions, kept for comparison with the report's (DESIGN §6).

Before the report took t intervals with the top level's degrees of freedom
(gemkd.experiments.report.intervals), a verdict read the 95 % percentile interval of a paired
bootstrap nested over worlds (drawn with replacement), each world's evaluation users and its
training seeds, and wanted a strict majority of worlds agreeing on the sign. With 3 top-level
units a percentile interval is a normal one with its variance shrunk by (W − 1) / W and no t
quantile: it undercovers (15–22 % false verdicts on one world when the seeds dominate;
benchmarks/null_calibration.py measures it,
tests/transfer/metrics/test_null_calibration.py holds that it fails). :data:`PERCENTILE` plugs
into ``lag_tables(..., rule=PERCENTILE)``; the world level of
the nested bootstrap (:func:`world_draws`, :func:`pool_worlds`) lives here because nothing else
draws worlds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.intervals import (
    Bounds,
    WorldArrays,
    arm_stats,
    bootstrap_settings,
    check_against_results,
    lag_tables,
)
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.bootstrap import interval, rng_for, seed_mean, seed_weights

#: Stream keys of :func:`rng_for` for the seeds of a world and the worlds of a run (1, the
#: users', is the report's: both rules draw the same users).
SEEDS, WORLDS = 2, 3
#: What the rule's tables are called, and in words (the report's rule paragraph style).
NAME = "percentile"
TEXT = ("95 % percentile intervals of a paired, user-level bootstrap nested with the training "
        "seeds and the worlds, and a majority of worlds agreeing on the sign")


@dataclass(frozen=True)
class WorldDraws:
    """Replicate b's j-th world slot is world ``world[b, j]``, with that world's inner
    (users, seeds) replicate ``replicate[b, j]``."""

    world: np.ndarray
    replicate: np.ndarray


def world_draws(n_worlds: int, samples: int, rng: np.random.Generator) -> WorldDraws:
    """W worlds drawn with replacement per replicate. Each slot reads its world's inner
    replicates through its own random permutation, so a world drawn twice in one replicate gets
    two different inner (users, seeds) replicates, almost always, rather than the same one
    twice (slot 0 keeps the identity: with one world the inner replicates are used as they
    are)."""
    world = rng.integers(0, n_worlds, size=(samples, n_worlds))
    perms = [np.arange(samples)] + [rng.permutation(samples) for _ in range(n_worlds - 1)]
    return WorldDraws(world, np.stack(perms, axis=1))


def pool_worlds(per_world: np.ndarray, draws: WorldDraws) -> np.ndarray:
    """Mean over each replicate's drawn worlds: ``per_world [W, B, ...]`` → ``[B, ...]``;
    worlds where a value is missing (nan) are left out of that mean."""
    picked = per_world[draws.world, draws.replicate]  # [B, W, ...]
    return seed_mean(picked, np.ones(draws.world.shape))


@dataclass(frozen=True)
class PercentileRule:
    """The nested percentile bootstrap and a strict majority of worlds (an
    :class:`~gemkd.experiments.report.intervals.IntervalRule`); no p-values."""

    name: str = NAME

    def bounds(self, per: list[WorldArrays], baseline: int | None, reference: int | None,
               samples: int, seed: int, level: float, point: dict[str, np.ndarray]
               ) -> tuple[Bounds, dict[str, np.ndarray]]:
        """Percentile bounds of the bootstrap nested over worlds (with replacement), users and
        seeds; ratios only where their denominator's interval lies above 0."""
        reps = []
        for p in per:
            assert p.reps is not None and p.teacher_reps is not None  # drawn for a rule
            weights = seed_weights(p.seed_ne.shape[0], samples, rng_for(seed, SEEDS, p.world))
            reps.append((seed_mean(p.reps, weights), p.teacher_reps))
        stats = arm_stats(np.stack([r[0] for r in reps]), np.stack([r[1] for r in reps]),
                          baseline, reference)
        draws = world_draws(len(per), samples, rng_for(seed, WORLDS))
        pooled = {k: pool_worlds(v, draws) for k, v in stats.items()}
        for key, den in (("eff", "kd"), ("tr", "fm")):
            ok = interval(pooled[den], level)[0] > 0  # [G, T]; nan compares False
            with np.errstate(divide="ignore", invalid="ignore"):
                pooled[key] = np.where(ok, pooled["delta"] / pooled[den][:, None], np.nan)
                point[key] = np.where(ok, point["delta"] / point[den][None], np.nan)
        bounds = {k: interval(v, level) for k, v in pooled.items()}
        nan = np.full(point["delta"].shape, np.nan)
        return bounds, {"delta": nan, "vs_kd": nan, "fm": np.full(point["fm"].shape, np.nan)}

    def resolves(self, agreeing: int, worlds: int) -> bool:
        """A strict majority of worlds agrees on the sign."""
        return 2 * agreeing > worlds


PERCENTILE = PercentileRule()


def run_table(run_dir: str | Path, level: float = 0.95, reference: str = "kd") -> pd.DataFrame:
    """A run directory's table under this rule (what ``run_intervals`` gives under the report's,
    for the lags with per-user files): the files read, checked against results.csv, every lag's
    table stacked.

    Raises
    ------
    ConfigError
        As ``run_intervals``; also a run without per-user files (this rule needs them).
    """
    run = RunDir(run_dir)
    samples, seed = bootstrap_settings(run.spec())
    sets = load_eval_sets(run)
    if not sets:
        raise ConfigError(f"{run.clusters_dir}: no per-user evaluation files; the percentile "
                          "rule resamples them")
    check_against_results(sets, run.results())
    lags = sorted({s.lag for s in sets})
    parts = [lag_tables([s for s in sets if s.lag == lag], samples, seed,
                        [(level, reference)], PERCENTILE)[0][0] for lag in lags]
    return pd.concat(parts, ignore_index=True)

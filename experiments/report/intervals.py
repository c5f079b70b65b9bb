"""95 % intervals and verdicts per (teacher lag, domain, task, variant) of a run (DESIGN §6).

"2 std over 3 training seeds on one world" flipped on a second world, so a verdict here needs an
interval that holds all three noises: training seeds, evaluation users, worlds. Point estimate:
the mean over worlds of each world's mean over seeds. Interval: the percentile interval of the
paired user-level bootstrap nested with seeds and worlds (:mod:`gemkd.transfer.metrics.bootstrap`);
every statistic of a lag is formed from the same replicates, so differences stay paired.

Verdicts: ΔNE = NE(baseline) − NE(variant) is a ``real gain`` (``real loss``) when its interval
lies above (below) 0 and a strict majority of worlds' point estimates have the pooled sign, else
``not resolved``; the same rule on the paired difference vs_kd = ΔNE − ΔNE(KD) gives ``beats KD``
/ ``below KD`` (efficiency = ΔNE / ΔNE(KD) is shown beside it: a ratio is worse behaved). A
verdict is empty where the row is its own reference (baseline's gain, KD against KD) or the
reference is missing. A ratio (efficiency, TR = ΔNE / ΔNE_FM with ΔNE_FM = NE(baseline) −
NE(GEM teacher)) is left empty unless its denominator's interval lies above 0: a ratio to noise
means nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.clusters import (
    GEM,
    EvalSet,
    has_clusters,
    load_eval_sets,
    point_frame,
    unique_groups,
)
from gemkd.experiments.report.load import WORLD, load_results, load_spec
from gemkd.experiments.results_schema import BASELINE, KD
from gemkd.experiments.results_schema import KEYS as CELL_KEYS
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.bootstrap import (
    interval,
    ne_point,
    ne_replicates,
    pool_worlds,
    rng_for,
    seed_mean,
    seed_weights,
    world_draws,
)

GAIN, LOSS, UNRESOLVED = "real gain", "real loss", "not resolved"
BEATS, BELOW = "beats KD", "below KD"
KEYS = list(CELL_KEYS)  # results_schema.KEYS as a list: frame[KEYS] selects columns
COLUMNS = [
    *KEYS, "ne", "ne_lo", "ne_hi", "delta_ne", "delta_ne_lo", "delta_ne_hi",
    "efficiency_vs_kd", "efficiency_lo", "efficiency_hi", "vs_kd", "vs_kd_lo", "vs_kd_hi",
    "transfer_ratio", "tr_lo", "tr_hi", "n_worlds", "worlds_agree_delta_ne", "worlds_agree_vs_kd",
    "gain_verdict", "kd_verdict", "delta_ne_half_width", "vs_kd_half_width",
]
WORLD_COLUMNS = [*KEYS, WORLD, "n_seeds", "ne", "delta_ne", "vs_kd", "efficiency_vs_kd"]
#: Stream keys of :func:`rng_for`: users and seeds per world, worlds per run.
USERS, SEEDS, WORLDS = 1, 2, 3
#: A warning when the files' NE and results.csv's differ by more than this (same data, sums).
TOLERANCE = 1e-6


@dataclass(frozen=True)
class Intervals:
    """``table``: one row per (lag, domain, task, variant), :data:`COLUMNS`; ``by_world``: each
    world's point estimates, :data:`WORLD_COLUMNS`; ``resolved``: False for a run without
    per-user evaluation files (its interval columns are NaN)."""

    table: pd.DataFrame
    by_world: pd.DataFrame
    samples: int
    seed: int
    worlds: list[int]
    resolved: bool
    level: float = 0.95


def bootstrap_settings(spec: dict[str, Any] | None) -> tuple[int, int]:
    """(samples, seed) from spec.yaml's ``bootstrap`` (BootstrapSpec's defaults when absent)."""
    boot = (spec or {}).get("bootstrap") or {}
    return int(boot.get("samples", 1000)), int(boot.get("seed", 0))


def run_intervals(run_dir: str | Path, results: pd.DataFrame | None = None,
                  spec: dict[str, Any] | None = None, level: float = 0.95) -> Intervals:
    """The intervals of a run directory (results.csv, spec.yaml, clusters/)."""
    run_dir = Path(run_dir)
    results = load_results(run_dir) if results is None else results
    spec = load_spec(run_dir) if spec is None else spec
    samples, seed = bootstrap_settings(spec)
    sets = load_eval_sets(run_dir) if has_clusters(run_dir) else []
    if not sets:
        table, by_world = from_results(results)
        worlds = sorted(results[WORLD].unique().tolist())
        return Intervals(table, by_world, samples, seed, worlds, False, level)
    check_against_results(sets, results)
    parts = [lag_intervals([s for s in sets if s.lag == lag], samples, seed, level)
             for lag in sorted({s.lag for s in sets})]
    table = pd.concat([p[0] for p in parts], ignore_index=True)
    by_world = pd.concat([p[1] for p in parts], ignore_index=True)
    present = results[KEYS].drop_duplicates()
    table = table.merge(present, on=KEYS, how="inner")[COLUMNS]
    by_world = by_world.merge(present, on=KEYS, how="inner")[WORLD_COLUMNS]
    worlds = sorted({s.world for s in sets})
    return Intervals(table, by_world, samples, seed, worlds, True, level)


def check_against_results(sets: list[EvalSet], results: pd.DataFrame) -> None:
    """The files' NE must be results.csv's: anything else means they are not the same run."""
    points = point_frame(sets)
    keys = [WORLD, "teacher_lag_days", "variant", "seed", "domain", "task"]
    both = points.merge(results[[*keys, "ne"]], on=keys, suffixes=("", "_results"))
    diff = (both["ne"] - both["ne_results"]).abs()
    bad = both[diff > TOLERANCE]
    if not bad.empty:
        r = bad.iloc[0]
        raise ConfigError(
            f"clusters/: NE from the per-user files differs from results.csv in {len(bad)} "
            f"row(s), e.g. variant={r['variant']} seed={r['seed']} world={r[WORLD]} "
            f"lag={r['teacher_lag_days']} {r['domain']}/{r['task']}: {r['ne']:.6f} vs "
            f"{r['ne_results']:.6f}; the files are not this run's evaluation")


def lag_intervals(sets: list[EvalSet], samples: int, seed: int,
                  level: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Intervals of one teacher lag over its worlds: (table rows, per-world rows)."""
    groups, tasks = sets[0].groups, sets[0].tasks
    for es in sets[1:]:
        if es.groups != groups or es.tasks != tasks:
            raise ConfigError(f"clusters/world={es.world}/lag={es.lag}: domains {es.domains} "
                              f"and tasks {es.tasks} differ from world {sets[0].world}'s")
    variants = list(dict.fromkeys(v for es in sets for v, _ in es.students))
    per = [_world_ne(es, variants, samples, seed) for es in sets]
    ib = variants.index(BASELINE) if BASELINE in variants else None
    ik = variants.index(KD) if KD in variants else None
    reps = _stats(np.stack([p[0] for p in per]), np.stack([p[2] for p in per]), ib, ik)
    worlds = _stats(np.stack([p[1] for p in per]), np.stack([p[3] for p in per]), ib, ik)
    draws = world_draws(len(sets), samples, rng_for(seed, WORLDS))
    pooled = {k: pool_worlds(v, draws) for k, v in reps.items()}
    point = {k: _mean0(v) for k, v in worlds.items()}
    _ratios(pooled, point, level)
    bounds = {k: interval(v, level) for k, v in pooled.items()}
    agree = {k: _agree(worlds[k], point[k]) for k in ("delta", "vs_kd")}
    n_worlds = np.isfinite(worlds["ne"]).sum(axis=0)
    n_seeds = np.stack([p[4] for p in per])

    rows, world_rows = [], []
    lag = sets[0].lag
    for g, domain in unique_groups(groups):
        for t, task in enumerate(tasks):
            for v, variant in enumerate(variants):
                i = (v, g, t)
                if not math.isfinite(point["ne"][i]):
                    continue  # no data in this cell
                row = {"teacher_lag_days": lag, "domain": domain, "task": task,
                       "variant": variant, "n_worlds": int(n_worlds[i]),
                       "worlds_agree_delta_ne": int(agree["delta"][i]),
                       "worlds_agree_vs_kd": int(agree["vs_kd"][i])}
                for key, (name, lo, hi) in _NAMES.items():
                    row[name], row[lo], row[hi] = (point[key][i], bounds[key][0][i],
                                                   bounds[key][1][i])
                row["gain_verdict"] = ("" if variant == BASELINE or ib is None else verdict(
                    row["delta_ne_lo"], row["delta_ne_hi"], row["worlds_agree_delta_ne"],
                    row["n_worlds"], GAIN, LOSS))
                row["kd_verdict"] = ("" if variant == KD or ik is None else verdict(
                    row["vs_kd_lo"], row["vs_kd_hi"], row["worlds_agree_vs_kd"],
                    row["n_worlds"], BEATS, BELOW))
                row["delta_ne_half_width"] = (row["delta_ne_hi"] - row["delta_ne_lo"]) / 2
                row["vs_kd_half_width"] = (row["vs_kd_hi"] - row["vs_kd_lo"]) / 2
                rows.append(row)
                for w, es in enumerate(sets):
                    world_rows.append({
                        "teacher_lag_days": lag, "domain": domain, "task": task,
                        "variant": variant, WORLD: es.world, "n_seeds": int(n_seeds[w, v]),
                        "ne": worlds["ne"][w][i], "delta_ne": worlds["delta"][w][i],
                        "vs_kd": worlds["vs_kd"][w][i], "efficiency_vs_kd": worlds["eff"][w][i]})
    return (pd.DataFrame(rows, columns=COLUMNS),
            pd.DataFrame(world_rows, columns=WORLD_COLUMNS))


#: statistic → (point column, lower, upper) of :data:`COLUMNS`
_NAMES = {
    "ne": ("ne", "ne_lo", "ne_hi"),
    "delta": ("delta_ne", "delta_ne_lo", "delta_ne_hi"),
    "eff": ("efficiency_vs_kd", "efficiency_lo", "efficiency_hi"),
    "vs_kd": ("vs_kd", "vs_kd_lo", "vs_kd_hi"),
    "tr": ("transfer_ratio", "tr_lo", "tr_hi"),
}


def verdict(lo: float, hi: float, agree: int, n_worlds: int, above: str, below: str) -> str:
    """``above``/``below`` when the interval excludes 0 on that side and a strict majority of
    worlds agrees on the sign; otherwise not resolved."""
    majority = 2 * agree > n_worlds
    if majority and lo > 0:
        return above
    if majority and hi < 0:
        return below
    return UNRESOLVED


def _world_ne(es: EvalSet, variants: list[str], samples: int, seed: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One world's seed-averaged variant NE replicates ``[B, V, G, T]`` and points
    ``[V, G, T]``, the GEM teacher's ``[B, G, T]`` and ``[G, T]``, and seeds per variant."""
    reps = ne_replicates(es.sums, samples, rng_for(seed, USERS, es.world))
    point = ne_point(es.sums)
    seeds = sorted({s for _, s in es.students})
    shape = (len(seeds), len(variants), *point.shape[1:])
    grid = np.full((samples, *shape), np.nan)
    pgrid = np.full((1, *shape), np.nan)
    count = np.zeros(len(variants), dtype=int)
    for a, (variant, s) in enumerate(es.students):
        v = variants.index(variant)
        grid[:, seeds.index(s), v] = reps[:, a]
        pgrid[0, seeds.index(s), v] = point[a]
        count[v] += 1
    ne = seed_mean(grid, seed_weights(len(seeds), samples, rng_for(seed, SEEDS, es.world)))
    ne_pt = seed_mean(pgrid, np.ones((1, len(seeds))))[0]
    arm = es.teacher_arm(GEM)
    if arm is None:
        return ne, ne_pt, np.full(reps[:, 0].shape, np.nan), np.full(point[0].shape, np.nan), \
            count
    return ne, ne_pt, reps[:, arm], point[arm], count


def _stats(ne: np.ndarray, teacher: np.ndarray, ib: int | None,
           ik: int | None) -> dict[str, np.ndarray]:
    """NE, ΔNE, vs_kd ``[..., V, G, T]``, ΔNE(KD) and ΔNE_FM ``[..., G, T]``, and each
    world's own efficiency (for the per-world table) from NE and the teacher's NE."""
    nan_v, nan_g = np.full(ne.shape, np.nan), np.full(teacher.shape, np.nan)
    delta = ne[..., [ib], :, :] - ne if ib is not None else nan_v
    kd = delta[..., ik, :, :] if ik is not None else nan_g
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.where(kd[..., None, :, :] > 0, delta / kd[..., None, :, :], np.nan)
    return {"ne": ne, "delta": delta, "vs_kd": delta - kd[..., None, :, :], "kd": kd,
            "fm": ne[..., ib, :, :] - teacher if ib is not None else nan_g, "eff": eff}


def _ratios(pooled: dict[str, np.ndarray], point: dict[str, np.ndarray], level: float) -> None:
    """Efficiency and TR replicates and points from the pooled ΔNEs, each left nan unless its
    denominator's interval lies above 0."""
    for key, den in (("eff", "kd"), ("tr", "fm")):
        ok = interval(pooled[den], level)[0] > 0  # [G, T]; nan compares False
        with np.errstate(divide="ignore", invalid="ignore"):
            pooled[key] = np.where(ok, pooled["delta"] / pooled[den][:, None], np.nan)
            point[key] = np.where(ok, point["delta"] / point[den][None], np.nan)


def _mean0(x: np.ndarray) -> np.ndarray:
    """Mean over axis 0 (worlds), leaving out missing ones."""
    return seed_mean(x[None], np.ones((1, x.shape[0])))[0]


def _agree(per_world: np.ndarray, pooled: np.ndarray) -> np.ndarray:
    """How many worlds' point estimates have the pooled estimate's sign."""
    return (np.isfinite(per_world) & (np.sign(per_world) == np.sign(pooled))).sum(axis=0)


def from_results(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run without per-user files: the same point estimates from results.csv, every interval
    column NaN and every verdict not resolved (seed spread on its own is no verdict)."""
    df = results.copy()
    df["fm"] = df["ne_baseline"] - df["ne_teacher"]
    per = (df.groupby([*KEYS, WORLD], sort=False)
           .agg(ne=("ne", "mean"), delta_ne=("delta_ne", "mean"), fm=("fm", "mean"),
                n_seeds=("seed", "nunique")).reset_index())
    cell = ["teacher_lag_days", "domain", "task", WORLD]
    kd = per[per["variant"] == KD].set_index(cell)["delta_ne"].rename("kd")
    per = per.join(kd, on=cell)
    per["vs_kd"] = per["delta_ne"] - per["kd"]
    per["efficiency_vs_kd"] = (per["delta_ne"] / per["kd"]).where(per["kd"] > 0)
    pooled = per.groupby(KEYS, sort=False)[["ne", "delta_ne", "fm", "kd", "vs_kd"]].mean()
    table = pooled.reset_index()
    table["efficiency_vs_kd"] = (table["delta_ne"] / table["kd"]).where(table["kd"] > 0)
    table["transfer_ratio"] = (table["delta_ne"] / table["fm"]).where(table["fm"] > 0)
    joined = per.merge(pooled[["delta_ne", "vs_kd"]].add_suffix("_pooled"), left_on=KEYS,
                       right_index=True, how="left")
    for col, name in (("delta_ne", "worlds_agree_delta_ne"), ("vs_kd", "worlds_agree_vs_kd")):
        same = np.sign(joined[col]) == np.sign(joined[f"{col}_pooled"])
        table[name] = same.groupby([joined[k] for k in KEYS], sort=False).sum().to_numpy()
    table["n_worlds"] = per.groupby(KEYS, sort=False)[WORLD].nunique().to_numpy()
    has_base, has_kd = (per["variant"] == BASELINE).any(), (per["variant"] == KD).any()
    table["gain_verdict"] = np.where((table["variant"] == BASELINE) | (not has_base), "",
                                     UNRESOLVED)
    table["kd_verdict"] = np.where((table["variant"] == KD) | (not has_kd), "", UNRESOLVED)
    table = table.reindex(columns=COLUMNS)
    return table, per.reindex(columns=WORLD_COLUMNS)

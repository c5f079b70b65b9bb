"""The interval tables of one teacher lag over its worlds (:func:`lag_tables`), at several
levels and references from one set of users' resamples, by the report's rule
(:func:`t_intervals`: t intervals over the worlds, or over one world's seeds with the users'
variance, and Fieller's interval for the ratios); :class:`IntervalRule` lets another rule make
them, for comparison only (the rule in words: :mod:`gemkd.experiments.report.intervals`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import EvalSet, unique_groups
from gemkd.experiments.report.interval_columns import (
    COLUMNS,
    GAIN,
    LOSS,
    STAT_COLUMNS,
    UNRESOLVED,
    WORLD_COLUMNS,
    labels,
    verdict,
)
from gemkd.experiments.report.table_names import WORLD
from gemkd.experiments.report.world_arrays import (
    WorldArrays,
    agree,
    arm_stats,
    mean0,
    per_seed,
    world_arrays,
)
from gemkd.experiments.run_dir.results_schema import BASELINE, KD
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.contrasts import Units, difference, fieller

#: statistic → (lower bounds, upper bounds), each shaped like the statistic's point estimate
Bounds = dict[str, tuple[np.ndarray, np.ndarray]]


def interval_method(sets: list[EvalSet]) -> str:
    """Which interval :func:`lag_intervals` makes for one lag's evaluation sets (a key of
    :data:`METHOD_TEXT`)."""
    if len(sets) >= 2:
        return "t-worlds"
    seeds = Counter(v for v, _ in sets[0].students) if sets else Counter()
    return "pivot-seeds" if max(seeds.values(), default=0) >= 2 else "users-only"


def lag_intervals(sets: list[EvalSet], samples: int, seed: int, level: float = 0.95,
                  reference: str = KD) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Intervals of one teacher lag over its worlds: (table rows, per-world rows); vs_kd and
    efficiency are against ``reference``."""
    return lag_tables(sets, samples, seed, [(level, reference)])[0]


class IntervalRule(Protocol):
    """Another interval rule for :func:`lag_tables`, for comparison with the report's (the rule
    of earlier versions: benchmarks/percentile_rule.py). It gets every world's arrays with the
    users' resamples drawn."""

    @property
    def name(self) -> str:
        """What the rule's tables are called (:attr:`Intervals.interval_method`)."""
        ...

    def bounds(self, per: list[WorldArrays], baseline: int | None, reference: int | None,
               samples: int, seed: int, level: float, point: dict[str, np.ndarray]
               ) -> tuple[Bounds, dict[str, np.ndarray]]:
        """Bounds of every statistic of :func:`arm_stats` (``eff``, ``tr`` included) and the
        p-values of ``delta``, ``vs_kd`` and ``fm``; fills ``point``'s ratios (``eff``,
        ``tr``). ``baseline``/``reference``: the arms' indices (None: missing)."""
        ...

    def resolves(self, agreeing: int, worlds: int) -> bool:
        """Whether a verdict may be drawn when ``agreeing`` of ``worlds`` worlds' point
        estimates have the pooled estimate's sign (the interval must exclude 0 as well)."""
        ...


def lag_tables(sets: list[EvalSet], samples: int, seed: int,
               wanted: Sequence[tuple[float, str]], rule: IntervalRule | None = None
               ) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """:func:`lag_intervals` at each (level, reference) of ``wanted``, the users' resamples
    drawn once: the same draws, so the tables differ only by level and reference (what a
    family's adjusted intervals and a twin's comparison with its original need).

    Parameters
    ----------
    sets
        One teacher lag's evaluation sets, a world each, with the same domains and tasks.
    samples, seed
        The users' resamples per world and the seed they are drawn from.
    wanted
        (level, reference arm) of each table.
    rule
        Another interval rule, for comparison only (None: the report's).

    Returns
    -------
    list of (table rows, per-world rows)
        One pair per entry of ``wanted``, columns :data:`COLUMNS` and :data:`WORLD_COLUMNS`.

    Raises
    ------
    ConfigError
        A world's domains or tasks differ from the first world's.
    """
    kind = interval_method(sets) if rule is None else rule.name
    groups, tasks = sets[0].groups, sets[0].tasks
    for es in sets[1:]:
        if es.groups != groups or es.tasks != tasks:
            raise ConfigError(f"clusters/world={es.world}/lag={es.lag}: domains {es.domains} "
                              f"and tasks {es.tasks} differ from world {sets[0].world}'s")
    variants = list(dict.fromkeys(v for es in sets for v, _ in es.students))
    need_reps = rule is not None or kind != "t-worlds"
    per = [world_arrays(es, variants, samples if need_reps else 0, seed) for es in sets]
    return [_lag_table(sets, per, variants, rule, samples, seed, level, reference)
            for level, reference in wanted]


def _lag_table(sets: list[EvalSet], per: list[WorldArrays], variants: list[str],
               rule: IntervalRule | None, samples: int, seed: int, level: float, reference: str
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    groups, tasks = sets[0].groups, sets[0].tasks
    ib = variants.index(BASELINE) if BASELINE in variants else None
    ir = variants.index(reference) if reference in variants else None
    worlds = arm_stats(np.stack([p.ne for p in per]), np.stack([p.teacher for p in per]), ib,
                       ir)
    point = {k: mean0(v) for k, v in worlds.items()}
    if rule is None:
        bounds, pvals = t_intervals(per, ib, ir, level, point)
    else:
        bounds, pvals = rule.bounds(per, ib, ir, samples, seed, level, point)
    agreed = {k: agree(worlds[k], point[k]) for k in ("delta", "vs_kd")}
    n_worlds = np.isfinite(worlds["ne"]).sum(axis=0)
    n_seeds = np.stack([p.count for p in per])
    beats, below = labels(reference)

    def decide(lo: float, hi: float, agreeing: int, n: int, above: str, under: str) -> str:
        if rule is not None and not rule.resolves(agreeing, n):
            return UNRESOLVED
        return verdict(lo, hi, above, under)

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
                       "worlds_agree_delta_ne": int(agreed["delta"][i]),
                       "worlds_agree_vs_kd": int(agreed["vs_kd"][i]),
                       "delta_ne_p": pvals["delta"][i], "vs_kd_p": pvals["vs_kd"][i],
                       "teacher_vs_baseline": -point["fm"][g, t],
                       "teacher_vs_baseline_lo": -bounds["fm"][1][g, t],
                       "teacher_vs_baseline_hi": -bounds["fm"][0][g, t],
                       "teacher_vs_baseline_p": pvals["fm"][g, t]}
                for key, (name, lo, hi) in STAT_COLUMNS.items():
                    row[name], row[lo], row[hi] = (point[key][i], bounds[key][0][i],
                                                   bounds[key][1][i])
                row["teacher_ne"], row["teacher_ne_lo"], row["teacher_ne_hi"] = (
                    point["tne"][g, t], bounds["tne"][0][g, t], bounds["tne"][1][g, t])
                row["gain_verdict"] = ("" if variant == BASELINE or ib is None else decide(
                    row["delta_ne_lo"], row["delta_ne_hi"], row["worlds_agree_delta_ne"],
                    row["n_worlds"], GAIN, LOSS))
                row["kd_verdict"] = ("" if variant == reference or ir is None else decide(
                    row["vs_kd_lo"], row["vs_kd_hi"], row["worlds_agree_vs_kd"],
                    row["n_worlds"], beats, below))
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


def t_intervals(per: list[WorldArrays], ib: int | None, ir: int | None, level: float,
                point: dict[str, np.ndarray]
                ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
    """Bounds and p-values per statistic from t intervals (worlds, or one world's seeds);
    fills ``point``'s ratios (nan unless the denominator's interval lies above 0)."""
    if len(per) >= 2:
        seeds = per_seed(per)  # [W, S, V, G, T]: each world's own noise, the interval's floor
        teachers = np.stack([p.teacher for p in per])
        arms = Units(np.stack([p.ne for p in per]), seeds=seeds)
        teacher = Units(teachers, seeds=np.broadcast_to(
            teachers[:, None], (seeds.shape[0], seeds.shape[1], *teachers.shape[1:])))
    else:
        p = per[0]
        s = p.seed_ne.shape[0]
        assert p.teacher_reps is not None  # one world: world_arrays drew the users' resamples
        arms = Units(p.seed_ne, p.reps, p.n_users)
        teacher = Units(np.broadcast_to(p.teacher, (s, *p.teacher.shape)),
                        np.broadcast_to(p.teacher_reps[:, None],
                                        (p.teacher_reps.shape[0], s, *p.teacher.shape)),
                        p.n_users)
    base, ref = _arm(arms, ib), _arm(arms, ir)
    units = {"ne": arms, "delta": base.expand() - arms, "vs_kd": ref.expand() - arms,
             "kd": base - ref, "fm": base - teacher, "tne": teacher}
    est = {k: difference(point[k], u, level) for k, u in units.items()}
    bounds = {k: (e.lo, e.hi) for k, e in est.items()}
    for key, den in (("eff", "kd"), ("tr", "fm")):
        ok = (est[den].lo > 0)[None]  # [1, G, T]; nan compares False
        lo, hi = fieller(point["delta"], point[den][None], units["delta"], units[den].expand(),
                         level)
        with np.errstate(divide="ignore", invalid="ignore"):
            point[key] = np.where(ok, point["delta"] / point[den][None], np.nan)
        bounds[key] = (np.where(ok, lo, np.nan), np.where(ok, hi, np.nan))
    return bounds, {"delta": est["delta"].p, "vs_kd": est["vs_kd"].p, "fm": est["fm"].p}


def _arm(arms: Units, i: int | None) -> Units:
    """Arm ``i``'s units, or nan ones of the same shape where the arm is missing."""
    if i is not None:
        return arms.take(i)
    one = arms.take(0)
    reps = None if one.replicates is None else np.full(one.replicates.shape, np.nan)
    seeds = None if one.seeds is None else np.full(one.seeds.shape, np.nan)
    return Units(np.full(one.values.shape, np.nan), reps, one.n_users, seeds)

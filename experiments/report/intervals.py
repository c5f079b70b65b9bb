"""95 % intervals, p-values and verdicts per (teacher lag, domain, task, variant) of a run
(DESIGN §6).

"2 std over 3 training seeds on one world" flipped on a second world, so a verdict here needs an
interval that holds all three noises: training seeds, evaluation users, worlds — with the
degrees of freedom of the level that has few units (:mod:`gemkd.transfer.metrics.contrasts`):

* several worlds: a t interval over the worlds' paired, seed-averaged values (W − 1 df; each
  world's own users and seeds are inside its value's spread), never narrower than the
  fixed-effect interval from each world's own per-seed noise (three worlds whose means agree
  by chance would otherwise resolve a null: tests/metrics/test_null_calibration.py);
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
adjustment reads. The per-world sign counts are reported beside it; they no longer gate it
(the t interval already pays for few worlds; tests/metrics/test_null_calibration.py holds the
rates). A verdict is empty where the row is its own reference or the reference is missing.
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
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import (
    GEM,
    EvalSet,
    has_clusters,
    load_eval_sets,
    point_frame,
    unique_groups,
)
from gemkd.experiments.report.table_names import WORLD
from gemkd.experiments.results_schema import BASELINE, CELL_KEYS, KD
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.bootstrap import ne_point, ne_replicates, rng_for, seed_mean
from gemkd.transfer.metrics.contrasts import Units, difference, fieller

GAIN, LOSS, UNRESOLVED = "real gain", "real loss", "not resolved"
BEATS, BELOW = "beats KD", "below KD"
COLUMNS = [
    *CELL_KEYS, "ne", "ne_lo", "ne_hi", "delta_ne", "delta_ne_lo", "delta_ne_hi",
    "efficiency_vs_kd", "efficiency_lo", "efficiency_hi", "vs_kd", "vs_kd_lo", "vs_kd_hi",
    "transfer_ratio", "tr_lo", "tr_hi", "n_worlds", "worlds_agree_delta_ne", "worlds_agree_vs_kd",
    "gain_verdict", "kd_verdict", "delta_ne_half_width", "vs_kd_half_width",
    "delta_ne_p", "vs_kd_p", "teacher_ne", "teacher_ne_lo", "teacher_ne_hi",
    "teacher_vs_baseline", "teacher_vs_baseline_lo", "teacher_vs_baseline_hi",
    "teacher_vs_baseline_p",
]
WORLD_COLUMNS = [*CELL_KEYS, WORLD, "n_seeds", "ne", "delta_ne", "vs_kd", "efficiency_vs_kd"]
#: Stream key of :func:`rng_for` for the users' resamples of a world (2 and 3, seeds and worlds,
#: are benchmarks/percentile_rule.py's).
USERS = 1
#: A warning when the files' NE and results.csv's differ by more than this (same data, sums).
TOLERANCE = 1e-6
#: What :attr:`Intervals.interval_method` names, in words (the report's rule paragraph).
METHOD_TEXT = {
    "t-worlds": "t intervals over the worlds' paired, seed-averaged values (W − 1 degrees of "
                "freedom; each world's users and seeds are inside their spread), never "
                "narrower than the fixed-effect interval of each world's own seed-to-seed "
                "noise (a random-effects interval with the Hartung–Knapp variance and its ad "
                "hoc floor)",
    "pivot-seeds": "intervals on one world from the evaluation users' variance (a paired, "
                   "user-level bootstrap) plus the training seeds' variance over their "
                   "number, the latter with its S − 1 degrees of freedom (a generalized pivot: "
                   "Student's t when the seeds' noise dominates, the normal when the users' "
                   "does)",
    "users-only": "intervals on one world and one training seed from a paired, user-level "
                  "bootstrap: the seed-to-seed noise is not in them",
    "none": "no intervals (no per-user evaluation files)",
}


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


def interval_method(sets: list[EvalSet]) -> str:
    """Which interval :func:`lag_intervals` makes for one lag's evaluation sets (a key of
    :data:`METHOD_TEXT`)."""
    if len(sets) >= 2:
        return "t-worlds"
    seeds = Counter(v for v, _ in sets[0].students) if sets else Counter()
    return "pivot-seeds" if max(seeds.values(), default=0) >= 2 else "users-only"


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


def labels(reference: str = KD) -> tuple[str, str]:
    """The verdict words of a difference against ``reference``: ("beats KD", "below KD") for
    plain KD, else ("beats <reference>", "below <reference>")."""
    return (BEATS, BELOW) if reference == KD else (f"beats {reference}", f"below {reference}")


def lag_intervals(sets: list[EvalSet], samples: int, seed: int, level: float = 0.95,
                  reference: str = KD) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Intervals of one teacher lag over its worlds: (table rows, per-world rows); vs_kd and
    efficiency are against ``reference``."""
    return lag_tables(sets, samples, seed, [(level, reference)])[0]


#: statistic → (lower bounds, upper bounds), each shaped like the statistic's point estimate
Bounds = dict[str, tuple[np.ndarray, np.ndarray]]


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
    per = [_world_arrays(es, variants, samples if need_reps else 0, seed) for es in sets]
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
    point = {k: _mean0(v) for k, v in worlds.items()}
    if rule is None:
        bounds, pvals = _t_intervals(per, ib, ir, level, point)
    else:
        bounds, pvals = rule.bounds(per, ib, ir, samples, seed, level, point)
    agree = {k: _agree(worlds[k], point[k]) for k in ("delta", "vs_kd")}
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
                       "worlds_agree_delta_ne": int(agree["delta"][i]),
                       "worlds_agree_vs_kd": int(agree["vs_kd"][i]),
                       "delta_ne_p": pvals["delta"][i], "vs_kd_p": pvals["vs_kd"][i],
                       "teacher_vs_baseline": -point["fm"][g, t],
                       "teacher_vs_baseline_lo": -bounds["fm"][1][g, t],
                       "teacher_vs_baseline_hi": -bounds["fm"][0][g, t],
                       "teacher_vs_baseline_p": pvals["fm"][g, t]}
                for key, (name, lo, hi) in _NAMES.items():
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


#: statistic → (point column, lower, upper) of :data:`COLUMNS`
_NAMES = {
    "ne": ("ne", "ne_lo", "ne_hi"),
    "delta": ("delta_ne", "delta_ne_lo", "delta_ne_hi"),
    "eff": ("efficiency_vs_kd", "efficiency_lo", "efficiency_hi"),
    "vs_kd": ("vs_kd", "vs_kd_lo", "vs_kd_hi"),
    "tr": ("transfer_ratio", "tr_lo", "tr_hi"),
}


def verdict(lo: float, hi: float, above: str, below: str) -> str:
    """``above``/``below`` when the interval excludes 0 on that side; otherwise not resolved —
    a nan interval included."""
    if lo > 0:
        return above
    if hi < 0:
        return below
    return UNRESOLVED


@dataclass(frozen=True, eq=False)
class WorldArrays:
    """One world's arms by seed: ``seed_ne [S, V, G, T]`` (nan: no such run), their mean over
    seeds ``ne [V, G, T]``, the GEM teacher's ``teacher [G, T]``, runs per variant ``count``;
    with resamples, ``reps [B, S, V, G, T]`` and ``teacher_reps [B, G, T]``."""

    seed_ne: np.ndarray
    ne: np.ndarray
    teacher: np.ndarray
    count: np.ndarray
    n_users: int
    world: int
    reps: np.ndarray | None = None
    teacher_reps: np.ndarray | None = None


def _world_arrays(es: EvalSet, variants: list[str], samples: int, seed: int) -> WorldArrays:
    """One world's arms arranged by (seed, variant); user resamples when ``samples`` > 0."""
    point = ne_point(es.sums)
    seeds = sorted({s for _, s in es.students})
    shape = (len(seeds), len(variants), *point.shape[1:])
    grid = np.full(shape, np.nan)
    count = np.zeros(len(variants), dtype=int)
    reps = ne_replicates(es.sums, samples, rng_for(seed, USERS, es.world)) if samples else None
    rgrid = np.full((samples, *shape), np.nan) if samples else None
    for a, (variant, s) in enumerate(es.students):
        v = variants.index(variant)
        grid[seeds.index(s), v] = point[a]
        if rgrid is not None and reps is not None:
            rgrid[:, seeds.index(s), v] = reps[:, a]
        count[v] += 1
    ne = seed_mean(grid[None], np.ones((1, len(seeds))))[0]
    arm = es.teacher_arm(GEM)
    teacher = point[arm] if arm is not None else np.full(point.shape[1:], np.nan)
    teacher_reps = None
    if reps is not None:
        teacher_reps = reps[:, arm] if arm is not None else np.full(reps[:, 0].shape, np.nan)
    return WorldArrays(grid, ne, teacher, count, int(np.unique(es.sums.user).size), es.world,
                        rgrid, teacher_reps)


def _t_intervals(per: list[WorldArrays], ib: int | None, ir: int | None, level: float,
                 point: dict[str, np.ndarray]
                 ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
    """Bounds and p-values per statistic from t intervals (worlds, or one world's seeds);
    fills ``point``'s ratios (nan unless the denominator's interval lies above 0)."""
    if len(per) >= 2:
        seeds = _per_seed(per)  # [W, S, V, G, T]: each world's own noise, the interval's floor
        teachers = np.stack([p.teacher for p in per])
        arms = Units(np.stack([p.ne for p in per]), seeds=seeds)
        teacher = Units(teachers, seeds=np.broadcast_to(
            teachers[:, None], (seeds.shape[0], seeds.shape[1], *teachers.shape[1:])))
    else:
        p = per[0]
        s = p.seed_ne.shape[0]
        assert p.teacher_reps is not None  # one world: _world_arrays drew the users' resamples
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


def _per_seed(per: list[WorldArrays]) -> np.ndarray:
    """Every world's per-seed NE ``[W, S, V, G, T]``, S the most seeds of any world (nan
    beyond a world's own); seeds are paired across arms by position, as in each world."""
    most = max(p.seed_ne.shape[0] for p in per)
    out = np.full((len(per), most, *per[0].seed_ne.shape[1:]), np.nan)
    for w, p in enumerate(per):
        out[w, : p.seed_ne.shape[0]] = p.seed_ne
    return out


def _arm(arms: Units, i: int | None) -> Units:
    """Arm ``i``'s units, or nan ones of the same shape where the arm is missing."""
    if i is not None:
        return arms.take(i)
    one = arms.take(0)
    reps = None if one.replicates is None else np.full(one.replicates.shape, np.nan)
    seeds = None if one.seeds is None else np.full(one.seeds.shape, np.nan)
    return Units(np.full(one.values.shape, np.nan), reps, one.n_users, seeds)


def arm_stats(ne: np.ndarray, teacher: np.ndarray, ib: int | None,
           ir: int | None) -> dict[str, np.ndarray]:
    """Every statistic of the tables from the arms' NE ``ne [..., V, G, T]`` and the teacher's
    ``teacher [..., G, T]`` (``ib``, ``ir``: the baseline's and the reference's arm, None when
    missing): ``ne``, ``delta`` (ΔNE), ``vs_kd``, ``eff`` (each world's own efficiency, for the
    per-world table) ``[..., V, G, T]``; ``kd`` (ΔNE of the reference), ``fm`` (ΔNE_FM) and
    ``tne`` (the teacher's NE) ``[..., G, T]``."""
    nan_v, nan_g = np.full(ne.shape, np.nan), np.full(teacher.shape, np.nan)
    delta = ne[..., [ib], :, :] - ne if ib is not None else nan_v
    kd = delta[..., ir, :, :] if ir is not None else nan_g
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.where(kd[..., None, :, :] > 0, delta / kd[..., None, :, :], np.nan)
    vs = ne[..., [ir], :, :] - ne if ir is not None else nan_v
    return {"ne": ne, "delta": delta, "vs_kd": vs, "kd": kd,
            "fm": ne[..., ib, :, :] - teacher if ib is not None else nan_g, "eff": eff,
            "tne": teacher}


def _mean0(x: np.ndarray) -> np.ndarray:
    """Mean over axis 0 (worlds), leaving out missing ones."""
    return seed_mean(x[None], np.ones((1, x.shape[0])))[0]


def _agree(per_world: np.ndarray, pooled: np.ndarray) -> np.ndarray:
    """How many worlds' point estimates have the pooled estimate's sign."""
    return (np.isfinite(per_world) & (np.sign(per_world) == np.sign(pooled))).sum(axis=0)


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

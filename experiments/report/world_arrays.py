"""One world's evaluation arranged for the intervals: each arm's NE by (seed, variant), the
users' resamples, and the tables' statistics computed from such arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemkd.experiments.report.cluster_files import GEM, EvalSet
from gemkd.transfer.metrics.bootstrap import ne_point, ne_replicates, rng_for, seed_mean

#: Stream key of :func:`rng_for` for the users' resamples of a world (2 and 3, seeds and worlds,
#: are benchmarks/percentile_rule.py's).
USERS = 1


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


def world_arrays(es: EvalSet, variants: list[str], samples: int, seed: int) -> WorldArrays:
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


def per_seed(per: list[WorldArrays]) -> np.ndarray:
    """Every world's per-seed NE ``[W, S, V, G, T]``, S the most seeds of any world (nan
    beyond a world's own); seeds are paired across arms by position, as in each world."""
    most = max(p.seed_ne.shape[0] for p in per)
    out = np.full((len(per), most, *per[0].seed_ne.shape[1:]), np.nan)
    for w, p in enumerate(per):
        out[w, : p.seed_ne.shape[0]] = p.seed_ne
    return out


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


def mean0(x: np.ndarray) -> np.ndarray:
    """Mean over axis 0 (worlds), leaving out missing ones."""
    return seed_mean(x[None], np.ones((1, x.shape[0])))[0]


def agree(per_world: np.ndarray, pooled: np.ndarray) -> np.ndarray:
    """How many worlds' point estimates have the pooled estimate's sign."""
    return (np.isfinite(per_world) & (np.sign(per_world) == np.sign(pooled))).sum(axis=0)

"""The report's interval rule: t intervals over the worlds (or over one world's seeds, with the
users' variance), Fieller's interval for the ratios (DESIGN §6; the rule in words:
:mod:`gemkd.experiments.report.intervals`)."""

from __future__ import annotations

import numpy as np

from gemkd.experiments.report.world_arrays import WorldArrays, per_seed
from gemkd.transfer.metrics.contrasts import Units, difference, fieller

#: statistic → (lower bounds, upper bounds), each shaped like the statistic's point estimate
Bounds = dict[str, tuple[np.ndarray, np.ndarray]]


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

"""t intervals and p-values of paired contrasts when the top level has few units (DESIGN §6).

Why not the percentile bootstrap: a run's top level has 3 units (worlds, or the seeds of one
world) and a percentile interval over 3 values is a normal interval with the variance shrunk
by (W − 1)/W and no allowance for estimating it: ~27 % misses at nominal 5 %. Here the
top-level variance enters with its degrees of freedom:

* **Several worlds** (``Units`` of per-world values ``[W, ...]``, and where given each world's
  per-seed values ``[W, S, ...]``): a random-effects interval with the Hartung–Knapp variance and
  the ad hoc rule that it is never narrower than the fixed-effect one (three worlds whose means
  agree by chance would otherwise resolve a null). Each world has its own users and seeds, so the
  spread of the worlds' (seed-averaged, paired) values holds the user, seed and world noise:
  ``mean ± t_{W−1} · sd / √W`` (Hartung–Knapp with equal weights), exact for normal world values
  whatever their mix of noises. But with 3 worlds that spread has 2 df: worlds whose means agree by
  chance gave ±0.0004 where one world's own seeds alone said ±0.016. So the half-width is at least
  the fixed-effect interval's ``t_ν · sqrt(Σ_w v_w) / W``, ``v_w`` world w's own variance of its
  mean from its per-seed paired values (between-seed variance over S_w; a world with one seed adds
  0), ν their Welch–Satterthwaite df: the variance the mean over worlds would have if worlds did
  not differ at all (the users' effect a world's seeds share is not in it; the worlds' spread holds
  it). Why equal weights, not inverse-variance ones: a world's ``v_w`` has S_w − 1 (2) df, and
  weights ``1 / (v_w + τ²)`` from it let a world whose seeds agree by chance dominate (measured:
  7–10 % false verdicts at 5 % over 8 worlds); the point estimate the report gives is the plain
  mean over worlds, and its fixed-effect variance is ``Σ v_w / W²``. The floor's price:
  conservative where worlds do not differ (the wider of two intervals;
  tests/transfer/metrics/test_null_calibration.py holds the rates).
* **One world, S seeds on the same users** (``Units`` of per-seed values ``[S, ...]`` with their
  user resamples ``[B, S, ...]``): for a per-seed value ``x_s = θ + a + b_s + e_s`` (``a`` the
  users' effect shared by the seeds, ``b_s`` the users' noise that differs by seed, ``e_s`` the
  seed's own), ``Var(mean_s x_s) = Var(a) + (Var(b) + Var(e)) / S``. The between-seed sample
  variance ``s²`` estimates ``Var(b) + Var(e)`` with S − 1 degrees of freedom; ``Var(a)`` is the
  users' covariance *across* seeds under resamples of the users (the bootstrap of
  :mod:`gemkd.transfer.metrics.bootstrap`, one user draw for every seed and arm), with U − 1
  (many: taken as known). Neither term counts ``b`` twice. The interval and p-value are those
  of the generalized pivot (Weerahandi) ``θ̂ − Z · sqrt(Var(a) + s² (S − 1) / (S · W))``,
  W ~ χ²_{S−1}: Student's t with S − 1 df when the seeds' part dominates, the normal when the
  users' does, and in between valid at every level. Welch–Satterthwaite df, the obvious
  alternative, are liberal here (up to 7.8 % misses at 5 %, and 10× the level at 0.2 %, when
  the seeds' part is 3–30 times the users': a small s² by chance also makes the df large);
  the pivot's price is a conservative middle (coverage up to ~97.5 % where the two parts are
  about equal). With one seed only the users' variance is known (the seed noise is not held;
  the caller says so).

Ratios (efficiency vs a reference, TR) get Fieller's interval over the same variance: the set
of ρ whose difference ``a − ρ·b`` has a t interval holding 0. It is finite only when b's own
interval excludes 0, and it holds 1 exactly when the difference ``a − b``'s interval holds 0, so
a ratio never says more than the difference its verdict reads.

Axis conventions: leading axes are the units (``K``) and, for replicates, ``B`` before them; the
trailing ``...`` is any batch of cells (variants, domains, tasks).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from gemkd.transfer.metrics.pivot import mixed_critical, mixed_tail

#: A seed-level user variance needs defined replicates in at least this share of the resamples
#: (an empty domain in a resample has no NE), as the percentile interval needed for its tails.
MIN_DEFINED = 0.975


@dataclass(frozen=True, eq=False)
class Units:
    """A contrast's values per top-level unit. ``replicates`` None: the units are worlds,
    ``values [W, ...]`` and, for the fixed-effect floor, ``seeds [W, S, ...]`` each world's
    per-seed values (nan: no such seed; paired across arms by position); else they are the
    seeds of one world, ``values [S, ...]`` on all its users and ``replicates [B, S, ...]``
    under user resamples shared by every seed and arm (``n_users`` users)."""

    values: np.ndarray
    replicates: np.ndarray | None = None
    n_users: int = 0
    seeds: np.ndarray | None = None

    @property
    def by_seeds(self) -> bool:
        return self.replicates is not None

    def __sub__(self, other: Units) -> Units:
        reps = None if self.replicates is None else self.replicates - other.replicates
        seeds = (None if self.seeds is None or other.seeds is None
                 else self.seeds - other.seeds)
        return Units(self.values - other.values, reps, self.n_users, seeds)

    def take(self, i: int) -> Units:
        """The cells at index ``i`` of the first cell axis (e.g. one variant)."""
        reps = None if self.replicates is None else self.replicates[:, :, i]
        seeds = None if self.seeds is None else self.seeds[:, :, i]
        return Units(self.values[:, i], reps, self.n_users, seeds)

    def expand(self) -> Units:
        """A new first cell axis of size 1, to broadcast against ``[V, ...]`` cells."""
        reps = None if self.replicates is None else self.replicates[:, :, None]
        seeds = None if self.seeds is None else self.seeds[:, :, None]
        return Units(self.values[:, None], reps, self.n_users, seeds)


@dataclass(frozen=True)
class Parts:
    """A (co)variance of the mean as a sum of components, each with its degrees of freedom:
    ``comps [K2, ...]``, ``dfs [K2, ...]``; per world 1 + W: the spread of the worlds' values
    (W − 1 df), then each world's own share of the within-world variance of the mean (the
    fixed-effect floor; S_w − 1 df each), per seed two: the users' (U − 1) and the seeds'
    (S − 1)."""

    comps: np.ndarray
    dfs: np.ndarray
    by_seeds: bool = False


@dataclass(frozen=True)
class Estimate:
    """``[...]`` arrays: the interval, the two-sided p-value of 0, the standard error and the
    degrees of freedom of the estimated part (W − 1 per world, S − 1 per seed)."""

    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray
    se: np.ndarray
    df: np.ndarray


def covariance(x: Units, y: Units) -> Parts:
    """Covariance of the means of ``x`` and ``y`` over their units (bilinear: the variance of
    ``x − ρy`` is ``cov(x,x) − 2ρ cov(x,y) + ρ² cov(y,y)`` component by component). Units where
    either is missing (nan) are left out; fewer than 2 worlds gives nan."""
    if x.by_seeds != y.by_seeds:
        raise ValueError("x and y must both be per-world or both per-seed units")
    if not x.by_seeds:
        xv, yv = np.broadcast_arrays(x.values, y.values)
        cov, n = _unit_cov(xv, yv)
        within, wdf = _within_cov(x.seeds, y.seeds, np.isfinite(xv) & np.isfinite(yv), n)
        with np.errstate(divide="ignore", invalid="ignore"):
            comp = np.where(n >= 2, cov / n, np.nan)
        return Parts(np.concatenate([comp[None], within]),
                     np.concatenate([(n - 1.0)[None], wdf]), by_seeds=False)
    return _seed_parts(x, y)


def _within_cov(xs: np.ndarray | None, ys: np.ndarray | None, used: np.ndarray,
                n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each world's share of the fixed-effect covariance of the mean over the ``used`` worlds,
    ``cov_seeds(x_w, y_w) / S_w / n²`` ``[W, ...]`` (its own covariance of its per-seed values
    over the seeds where both are defined), and its df S_w − 1; 0 where per-seed values are
    not given (one component) or a world has one seed (nothing to estimate its noise from)."""
    if xs is None or ys is None:
        return np.zeros((1, *n.shape)), np.ones((1, *n.shape))
    xs, ys = np.broadcast_arrays(xs, ys)
    m = np.isfinite(xs) & np.isfinite(ys)  # [W, S, ...]
    s = m.sum(axis=1).astype(np.float64)  # [W, ...]
    with np.errstate(divide="ignore", invalid="ignore"):
        xm = np.where(m, xs, 0.0).sum(axis=1, keepdims=True) / s[:, None]
        ym = np.where(m, ys, 0.0).sum(axis=1, keepdims=True) / s[:, None]
        cov = np.where(m, (xs - xm) * (ys - ym), 0.0).sum(axis=1) / (s - 1)
        per_world = np.where(used & (s >= 2) & (n >= 1), cov / s / (n * n), 0.0)
    return per_world, np.maximum(s - 1.0, 1.0)


def _unit_cov(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sample covariance over axis 0 where both are finite, and the count used."""
    m = np.isfinite(x) & np.isfinite(y)
    n = m.sum(axis=0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        xm = np.where(m, x, 0.0).sum(axis=0) / n
        ym = np.where(m, y, 0.0).sum(axis=0) / n
        cov = np.where(m, (x - xm) * (y - ym), 0.0).sum(axis=0) / (n - 1)
    return np.where(n >= 2, cov, np.nan), n


def _seed_parts(x: Units, y: Units) -> Parts:
    assert x.replicates is not None and y.replicates is not None  # by_seeds, checked above
    xv, yv = np.broadcast_arrays(x.values, y.values)
    xr, yr = np.broadcast_arrays(x.replicates, y.replicates)
    m = np.isfinite(xv) & np.isfinite(yv)  # [S, ...] seeds with both values
    s = m.sum(axis=0).astype(np.float64)
    seed_cov, _ = _unit_cov(np.where(m, xv, np.nan), np.where(m, yv, np.nan))
    with np.errstate(divide="ignore", invalid="ignore"):
        seed_comp = np.where(s >= 2, seed_cov / s, 0.0)
    # the users' part from resamples: rows where every used seed is defined
    ok_r = np.isfinite(xr) & np.isfinite(yr)
    rows = np.all(ok_r | ~m[None], axis=1)  # [B, ...]
    b = rows.sum(axis=0).astype(np.float64)
    xr0 = np.where(m[None] & rows[:, None], xr, 0.0)
    yr0 = np.where(m[None] & rows[:, None], yr, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_cov = _row_cov(xr0.sum(axis=1) / s, yr0.sum(axis=1) / s, rows, b)
        per_seed = _row_cov(xr0, yr0, rows[:, None], b[None])  # [S, ...]
        diag = np.where(m, per_seed, 0.0).sum(axis=0)
        cross = (s * s * mean_cov - diag) / (s * (s - 1))  # the users' effect shared by seeds
        user_comp = np.where(s >= 2, cross, diag)  # one seed: that seed's users' variance
    defined = (s >= 1) & (b >= MIN_DEFINED * xr.shape[0]) & (b >= 2)
    user_comp = np.where(defined, user_comp, np.nan)
    seed_comp = np.where(s >= 1, seed_comp, np.nan)
    comps = np.stack([user_comp, seed_comp])
    dfs = np.stack([np.full(s.shape, max(x.n_users - 1, 1), dtype=np.float64),
                    np.maximum(s - 1, 1.0)])
    return Parts(comps, dfs, by_seeds=True)


def _row_cov(x: np.ndarray, y: np.ndarray, rows: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Covariance over axis 0 (resamples) of the rows marked in ``rows``."""
    xm = np.where(rows, x, 0.0).sum(axis=0) / n
    ym = np.where(rows, y, 0.0).sum(axis=0) / n
    return np.where(rows, (x - xm) * (y - ym), 0.0).sum(axis=0) / (n - 1)


def _spread(parts: Parts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The total variance (per world: the worlds' spread's, the floor apart), the known
    (users') share of it (0 per world) and the df of the estimated part; components below 0,
    an estimate's noise, count as 0."""
    comps = np.maximum(parts.comps, 0.0)
    if not parts.by_seeds:
        return comps[0], np.zeros(comps[0].shape), parts.dfs[0]
    var = comps.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(var > 0, comps[0] / var, 1.0)
    return var, np.where(np.isnan(var), np.nan, share), parts.dfs[1]


def _by_df(df: np.ndarray, fn, *args: np.ndarray) -> np.ndarray:
    """``fn(df_value, *args restricted to it)`` for each distinct df, reassembled."""
    out = np.full(df.shape, np.nan)
    args = np.broadcast_arrays(df, *args)[1:]
    for value in np.unique(df[np.isfinite(df)]):
        m = df == value
        out[m] = fn(float(value), *(a[m] for a in args))
    return out


def _critical(parts: Parts, level: float) -> tuple[np.ndarray, np.ndarray]:
    """(standard error, critical value): the interval is point ± critical · se."""
    se, crit, _ = _critical_floor(parts, level)
    return se, crit


def _critical_floor(parts: Parts, level: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_critical` and where the fixed-effect floor decided it: per world, the wider of
    the worlds' t interval and the floor (its se and critical value there)."""
    var, share, df = _spread(parts)
    df = np.broadcast_to(df, var.shape)
    if parts.by_seeds:
        crit = _by_df(df, lambda d, u: mixed_critical(level, u, d), share)
        return np.sqrt(var), crit, np.zeros(var.shape, dtype=bool)
    crit = _by_df(df, lambda d, u: np.full(u.shape, _t_critical(level, d)), var)
    se, (floor, fdf) = np.sqrt(var), _floor(parts)
    fcrit = stats.t.ppf(0.5 + level / 2, fdf)
    with np.errstate(invalid="ignore"):
        wider = np.isfinite(se) & np.isfinite(crit) & (floor > 0) & (fcrit * floor > crit * se)
    return np.where(wider, floor, se), np.where(wider, fcrit, crit), wider


def _floor(parts: Parts) -> tuple[np.ndarray, np.ndarray]:
    """Per world: the fixed-effect standard error of the mean over worlds (0 if not given) and
    its Welch–Satterthwaite df ``(Σ c_w)² / Σ (c_w² / (S_w − 1))`` (each world's variance is
    estimated from its own few seeds: with the normal's critical value the floor alone
    resolved 5.5 % of the nulls whose world means agree)."""
    comps = np.maximum(np.nan_to_num(parts.comps[1:]), 0.0)
    total = comps.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(total > 0, total ** 2 / (comps ** 2 / parts.dfs[1:]).sum(axis=0), np.inf)
    return np.sqrt(total), df


@lru_cache(maxsize=256)
def _t_critical(level: float, df: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return float(stats.t.isf((1 - level) / 2, df))


def _p_value(point: np.ndarray, parts: Parts) -> np.ndarray:
    var, share, df = _spread(parts)
    se = np.sqrt(var)
    df = np.broadcast_to(df, var.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, point / se, np.nan)
    if parts.by_seeds:
        p = _by_df(df, lambda d, tt, u: mixed_tail(tt, u, d), t, share)
    else:
        p = 2 * stats.t.sf(np.abs(t), df)
    p = np.where(se == 0, np.where(point != 0, 0.0, np.nan), p)
    if not parts.by_seeds:  # the floor's p-value: resolved only where both intervals exclude 0
        floor, fdf = _floor(parts)
        with np.errstate(divide="ignore", invalid="ignore"):
            p_floor = np.where(floor > 0, 2 * stats.t.sf(np.abs(point) / floor, fdf), 0.0)
        p = np.fmax(p, np.where(np.isnan(p), np.nan, p_floor))
    return np.where(np.isfinite(point) & np.isfinite(se), p, np.nan)


def t_estimate(point: np.ndarray, parts: Parts, level: float = 0.95) -> Estimate:
    """``point ± critical · se`` and the two-sided p-value of 0 (per world the wider of t with
    W − 1 df and the fixed-effect floor, the generalized pivot per seed). A zero variance gives
    the point as its own interval (p = 0 unless the point is 0: then nan, nothing to test).
    ``se`` and ``df`` are the interval's: the floor's where it is the wider."""
    point = np.asarray(point, dtype=np.float64)
    se, crit, floored = _critical_floor(parts, level)
    with np.errstate(invalid="ignore"):
        half = np.where(se > 0, crit * se, 0.0)
    half = np.where(np.isnan(se) | np.isnan(crit) & (se > 0), np.nan, half)
    _, _, df = _spread(parts)
    if not parts.by_seeds:
        df = np.where(floored, _floor(parts)[1], np.broadcast_to(df, se.shape))
    df = np.broadcast_to(df, se.shape).astype(np.float64)
    return Estimate(point - half, point + half, _p_value(point, parts), se, df)


def difference(point: np.ndarray, units: Units, level: float = 0.95) -> Estimate:
    """The t interval and p-value of a contrast whose estimate is ``point``."""
    return t_estimate(point, covariance(units, units), level)


def fieller(a: np.ndarray, b: np.ndarray, a_units: Units, b_units: Units,
            level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Fieller's interval of ``a / b``: the ρ around ``a / b`` whose difference ``a − ρb`` has
    an interval holding 0, i.e. ``(a − ρb)² ≤ c(ρ)² · Var(a − ρb)`` with Var and the critical
    value c as :func:`difference` makes them (so ρ = 1 is inside exactly when ``a − b``'s
    interval holds 0). nan where it is not a finite interval (b's interval reaches 0). Each end
    is found by bisection: c depends on ρ per seed (the users' share of Var(a − ρb)), and
    clipping a negative users' component makes Var(a − ρb) no quadratic in ρ."""
    aa, ab, bb = (covariance(u, v) for u, v in ((a_units, a_units), (a_units, b_units),
                                                (b_units, b_units)))
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))

    def excess(rho: np.ndarray) -> np.ndarray:
        """``(a − ρb)² − c(ρ)² Var(a − ρb)``: ≤ 0 inside the interval."""
        parts = Parts(aa.comps - 2 * rho * ab.comps + rho * rho * bb.comps, aa.dfs,
                      aa.by_seeds)
        se, crit = _critical(parts, level)
        return (a - rho * b) ** 2 - (crit * se) ** 2

    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.where(b != 0, a / b, np.nan)
    ok = np.isfinite(centre) & (excess(np.nan_to_num(centre)) <= 0)
    centre = np.where(ok, centre, 0.0)
    ends = []
    for sign in (-1.0, 1.0):
        step = np.maximum(np.abs(centre), 1.0) * 0.5
        out = excess(centre + sign * step) > 0
        for _ in range(80):  # widen until outside (a ratio beyond 1e12× its centre: unbounded)
            if np.all(out | ~ok):
                break
            step = np.where(out, step, 2 * step)
            out = excess(centre + sign * step) > 0
        found = ok & out
        inner, outer = centre.copy(), centre + sign * step
        for _ in range(100):
            mid = (inner + outer) / 2
            beyond = excess(mid) > 0
            outer, inner = np.where(beyond, mid, outer), np.where(beyond, inner, mid)
        end = (inner + outer) / 2
        ends.append(np.where(found, end, np.nan))
    bounded = np.isfinite(ends[0]) & np.isfinite(ends[1])  # else a half-line: no interval
    return np.where(bounded, ends[0], np.nan), np.where(bounded, ends[1], np.nan)

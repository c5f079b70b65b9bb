"""What a run could detect and what a larger one would (DESIGN §6): the minimum detectable
effect of the report's intervals, their variance split into evaluation users, training seeds
and worlds, and the half-width and MDE a run of another size would get.

Why: an interval's half-width says what a run *did* resolve; a team that acts on 0.001 NE
needs to know what it would take. The variance of a paired contrast's mean over W worlds of S
seeds each, evaluated on U users, is, with the components of
:mod:`gemkd.transfer.metrics.contrasts` (``x_s = θ + a + b_s + e_s`` within a world, plus a
world's own shift ``c``)::

    Var = (τ² + V_a / k + (V_b / k + V_e) / S) / W

``V_a`` the users' effect the seeds share (the users' covariance across seeds under user
resamples: the pivot's known part), ``V_b`` the users' noise that differs by seed (a seed's own
users' variance under resamples, less ``V_a``), ``V_e`` the seed's own noise (its initialisation,
batch order and, with per-seed search draws, its draw: the between-seed variance less ``V_b``),
``τ²`` the worlds' (the spread of the worlds' seed-averaged values less what their users and
seeds explain; unknown from one world) and ``k`` the factor on the evaluation users: both user
terms are sampling variances over independent users, so they scale with 1 / U.

The MDE at power ``1 − β`` is the true effect whose interval excludes 0 with probability
``1 − β``: ``MDE = δ* · SE`` with δ* the root of the test's power. The power is exact for the
report's reference distributions — the standardized estimate is ``(δ + Z) / sqrt(u + (1 − u) ·
X / ν)`` with X ~ χ²_ν and the critical value taken at the *estimated* users' share (the
generalized pivot, :mod:`gemkd.transfer.metrics.pivot`): ``u = 0`` is the noncentral t with ν
df (the worlds' t), ``u = 1`` the normal, where δ* = z_{1−α/2} + z_{1−β} up to the far tail —
computed by quadrature on χ²_ν's quantiles (scipy.stats) and solved by scipy.optimize.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats
from scipy.optimize import brentq
from scipy.special import gammaln

from gemkd.transfer.metrics.contrasts import Units, covariance
from gemkd.transfer.metrics.pivot import chi2_nodes, mixed_critical

#: Power the report's MDE is at (and the planner's default).
POWER = 0.8
#: Beyond these df the estimated part is taken as known (χ² quantiles lose nothing there).
_KNOWN_DF = 1e6
#: Beyond these df the pivot's critical value is taken as t_df's (at most 1.3 % above it).
PIVOT_DF = 100


def power(delta: float, share: float, df: float, alpha: float = 0.05) -> float:
    """Two-sided power of the report's test at a true effect of ``delta`` standard errors.

    Parameters
    ----------
    delta
        The true effect over the true standard error of the estimate.
    share
        The users' (known) share ``u`` of the variance: 0 for a t interval, 1 for the normal.
    df
        The degrees of freedom ν of the estimated part (inf: known).
    alpha
        The two-sided level of the test.

    Returns
    -------
    float
        ``E_X[P(|δ + Z| > c(û) · r)]``, ``r = sqrt(u + (1 − u) X / ν)``, ``û = u / r²``, X ~ χ²_ν.
    """
    u = min(max(float(share), 0.0), 1.0)
    if u >= 1.0 or not math.isfinite(df) or df > _KNOWN_DF:
        z = float(stats.norm.isf(alpha / 2))
        return float(stats.norm.sf(z - delta) + stats.norm.cdf(-z - delta))
    nodes, weights = chi2_nodes(float(df))
    r = np.sqrt(u + (1 - u) * nodes / df)
    x = _critical(alpha, u, r, df) * r
    return float((stats.norm.sf(x - delta) + stats.norm.cdf(-x - delta)) @ weights)


@lru_cache(maxsize=4096)
def _detectable(share: float, df: float, alpha: float, target: float) -> float:
    lo, hi = 0.0, 4.0
    while power(hi, share, df, alpha) < target:
        hi *= 2
        if hi > 1e6:
            return math.inf
    return float(brentq(lambda d: power(d, share, df, alpha) - target, lo, hi, xtol=1e-6))


def detectable(share: float, df: float, alpha: float = 0.05, target: float = POWER) -> float:
    """δ*: the true effect, in standard errors, the test resolves with probability ``target``
    (nan where share or df is nan). Normal: z_{1−α/2} + z_target (2.80 at 5 %, 80 %)."""
    if not (math.isfinite(share) and (math.isfinite(df) or df == math.inf)):
        return math.nan
    if not 0 < alpha < 1 or not 0 < target < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {target}")
    return _detectable(round(min(max(share, 0.0), 1.0), 4), float(min(df, 1e9)), float(alpha),
                       float(target))


def mean_critical(share: float, df: float, alpha: float = 0.05) -> float:
    """The expected half-width in true standard errors, ``E_X[c(û) · r]`` (X ~ χ²_ν): what an
    interval of this design is on average, its SE estimated from ν df."""
    u = min(max(float(share), 0.0), 1.0)
    if u >= 1.0 or not math.isfinite(df) or df > _KNOWN_DF:
        return float(stats.norm.isf(alpha / 2))
    nodes, weights = chi2_nodes(float(df))
    r = np.sqrt(u + (1 - u) * nodes / df)
    return float((_critical(alpha, u, r, df) * r) @ weights)


def _critical(alpha: float, u: float, r: np.ndarray, df: float) -> np.ndarray:
    """The interval's critical value at each node: the pivot's at the estimated share
    ``u / r²``; Student's t at u = 0 and beyond :data:`PIVOT_DF` df, where the pivot lies
    between z and t_df, < 1.3 % apart (its table costs a root-finding per df)."""
    if u > 0 and df <= PIVOT_DF:
        return mixed_critical(1 - alpha, u / (r * r), float(df))
    return np.full(r.shape, float(stats.t.isf(alpha / 2, df)))


def c4(n: float) -> float:
    """E[s] / σ of a normal sample's standard deviation over n values."""
    return math.exp(0.5 * math.log(2 / (n - 1)) + gammaln(n / 2) - gammaln((n - 1) / 2))


@dataclass(frozen=True)
class Components:
    """A contrast's variance components (NE², one world's, averaged over the run's worlds) and
    the size they were measured at: ``users_shared`` V_a, ``users_seed`` V_b, ``seeds`` V_e,
    ``worlds`` τ² (nan: one world, not estimable); ``n_worlds``, ``n_seeds`` (per world, their
    mean), ``n_users`` (per world, their mean)."""

    users_shared: float
    users_seed: float
    seeds: float
    worlds: float
    n_worlds: int
    n_seeds: float
    n_users: float

    def split(self) -> dict[str, float]:
        """The variance of the run's own estimate by source (NE²): the evaluation users'
        ``(V_a + V_b / S) / W``, the training seeds' (their search draws inside)
        ``V_e / S / W``, the worlds' ``τ² / W`` (nan from one world)."""
        w, s = self.n_worlds, self.n_seeds
        return {"users": (self.users_shared + self.users_seed / s) / w,
                "seeds": self.seeds / s / w,
                "worlds": self.worlds / w if math.isfinite(self.worlds) else math.nan}


@dataclass(frozen=True)
class Prediction:
    """What a run of ``worlds`` × ``seeds`` on ``users`` times the evaluation users would
    get: the true SE of its estimate, the interval's expected half-width, its MDE at the given
    power and level, and which interval it would be (a key of METHOD_TEXT)."""

    worlds: int
    seeds: int
    users: float
    se: float
    half_width: float
    mde: float
    method: str
    assumes_no_world_effect: bool


def predict(c: Components, worlds: int, seeds: int, users: float = 1.0, alpha: float = 0.05,
            target: float = POWER) -> Prediction:
    """The half-width and MDE of the report's interval at ``worlds`` × ``seeds`` with the
    evaluation users × ``users``, from ``c``.

    Several worlds: the worlds' t (W − 1 df) over ``(τ² + V_a/k + (V_b/k + V_e)/S) / W``, its
    expected half-width ``t · c4(W) · SE``; where the fixed-effect floor (each world's own seed
    noise, ``W(S − 1)`` df) is the wider on average it decides, and the MDE is the larger of the
    two tests' (the floor's: its expected threshold plus z_power · SE). τ² unknown (one world)
    counts as 0: ``assumes_no_world_effect``. One world: the generalized pivot with the users'
    share ``u = (V_a/k) / Var`` and S − 1 df. One seed: the users' normal interval, which holds
    no seed noise (the SE given is still the true one).
    """
    if worlds < 1 or seeds < 1 or users <= 0:
        raise ValueError(f"worlds and seeds must be >= 1 and users > 0, got {worlds}, {seeds}, "
                         f"{users}")
    va, vb, ve = (max(x, 0.0) for x in (c.users_shared, c.users_seed, c.seeds))
    tau = c.worlds if math.isfinite(c.worlds) else 0.0
    within = va / users + (vb / users + ve) / seeds
    if worlds >= 2:
        var = (max(tau, 0.0) + within) / worlds
        se = math.sqrt(var)
        hk_half = float(stats.t.isf(alpha / 2, worlds - 1)) * c4(worlds) * se
        mde = detectable(0.0, worlds - 1, alpha, target) * se
        half = hk_half
        if seeds >= 2:
            floor_se = math.sqrt((vb / users + ve) / seeds / worlds)
            fdf = worlds * (seeds - 1)
            floor_half = float(stats.t.isf(alpha / 2, fdf)) * c4(fdf + 1) * floor_se
            half = max(hk_half, floor_half)
            mde = max(mde, floor_half + float(stats.norm.isf(1 - target)) * se)
        return Prediction(worlds, seeds, users, se, half, mde, "t-worlds",
                          not math.isfinite(c.worlds))
    if seeds >= 2:
        se = math.sqrt(within)
        share = (va / users) / within if within > 0 else 1.0
        return Prediction(1, seeds, users, se, mean_critical(share, seeds - 1, alpha) * se,
                          detectable(share, seeds - 1, alpha, target) * se, "pivot-seeds",
                          False)
    se = math.sqrt(within)
    z = float(stats.norm.isf(alpha / 2))
    return Prediction(1, 1, users, se, z * math.sqrt((va + vb) / users),
                      detectable(1.0, math.inf, alpha, target) * se, "users-only", False)


def world_components(units: Units) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One world's ``(V_a, V_b, V_e, s²)`` ``[...]`` from its per-seed values and their user
    resamples (``Units`` by seeds): V_a the users' covariance across seeds (the pivot's known
    part), V_b each seed's own users' variance (their mean) less V_a, V_e the between-seed
    variance s² less V_b; each clipped at 0 (an estimate's noise). One seed: V_a is that seed's
    users' variance, V_b 0, V_e and s² nan (no seed noise to see)."""
    if not units.by_seeds:
        raise ValueError("world_components needs one world's per-seed units with resamples")
    assert units.replicates is not None
    parts = covariance(units, units)
    present = np.isfinite(units.values)
    s = present.sum(axis=0).astype(np.float64)
    shared = np.maximum(parts.comps[0], 0.0)
    seed_var = np.where(s >= 2, parts.comps[1] * s, np.nan)
    own = []
    for i in range(units.values.shape[0]):
        one = Units(units.values[[i]], units.replicates[:, [i]], units.n_users)
        own.append(covariance(one, one).comps[0])
    with warnings.catch_warnings():  # a cell with no seed: nan, as it should
        warnings.simplefilter("ignore", RuntimeWarning)
        own_mean = np.nanmean(np.where(present, np.stack(own), np.nan), axis=0)
    vb = np.where(s >= 2, np.maximum(own_mean - shared, 0.0), 0.0)
    ve = np.where(s >= 2, np.maximum(seed_var - vb, 0.0), np.nan)
    return shared, vb, ve, seed_var


def run_components(worlds: list[Units]) -> dict[str, np.ndarray]:
    """Every cell's components over the run's worlds (each world's per-seed ``Units`` with user
    resamples): ``users_shared``, ``users_seed``, ``seeds`` (means over worlds), ``worlds`` τ²
    (the variance of the worlds' seed-averaged values less the mean of what each world's users
    and seeds give it, clipped at 0; nan with one world), ``n_worlds``, ``n_seeds`` (mean per
    world), arrays ``[...]``."""
    comps = [world_components(u) for u in worlds]
    va = np.stack([c[0] for c in comps])
    vb = np.stack([c[1] for c in comps])
    ve = np.stack([c[2] for c in comps])
    s2 = np.stack([c[3] for c in comps])
    seeds = np.stack([np.isfinite(u.values).sum(axis=0) for u in worlds]).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.stack([np.nanmean(u.values, axis=0) for u in worlds])
    used = np.isfinite(means)
    w = used.sum(axis=0).astype(np.float64)
    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, x in (("users_shared", va), ("users_seed", vb), ("seeds", ve)):
            out[name] = np.where(w > 0, np.where(used, x, 0.0).sum(axis=0) / w, np.nan)
        out["n_seeds"] = np.where(w > 0, np.where(used, seeds, 0.0).sum(axis=0) / w, np.nan)
        own = va + np.where(seeds >= 2, s2, 0.0) / seeds  # each world's value's variance
        mean_own = np.where(used, own, 0.0).sum(axis=0) / w
        centre = np.where(used, means, 0.0).sum(axis=0) / w
        spread = np.where(used, (means - centre) ** 2, 0.0).sum(axis=0) / (w - 1)
        out["worlds"] = np.where(w >= 2, np.maximum(spread - mean_own, 0.0), np.nan)
    out["n_worlds"] = w
    return out

"""Do small runs predict large ones? The rank agreement of the methods between two points of
the transfer-scaling study: Kendall's tau (and Spearman's rho) between the variants' mean ΔNE
at the smallest and at the largest teacher, with a percentile interval from a bootstrap over
the worlds and the seeds within them (both points resampled alike: a world and seed is the same
student data and the same training seed at every point, so the pairs stay paired).

The point statistics are scipy.stats'. Written here: the resampling, a two-level resample of a
(world, seed) table, which scipy.stats.bootstrap (one level of independent observations) does not
do; and tau-b over all resamples at once (:func:`tau_b_rows`, equal to scipy's, tested), since
scipy's per-call overhead made 2,000 resamples take seconds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
from scipy import stats


@dataclasses.dataclass(frozen=True)
class RankAgreement:
    """Kendall's tau between two points' variant means, its bootstrap interval and the share of
    resamples with tau > 0; Spearman's rho; the per-world taus; each point's order, best
    first; how often a resample's best variant is the same at both points."""

    tau: float
    tau_lo: float
    tau_hi: float
    p_positive: float
    rho: float
    per_world: dict[int, float]
    order_small: list[str]
    order_large: list[str]
    same_best: float
    n_boot: int
    n_units: int


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b, nan where either side is constant (no ranking to agree with)."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(stats.kendalltau(a, b).statistic)


def tau_b_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of ``a`` with the same row of ``b`` (shape [R, n]): (P − Q)
    / sqrt((n0 − ties of a) (n0 − ties of b)) over the n0 pairs; nan where a row is constant."""
    i, j = np.triu_indices(a.shape[1], k=1)
    da, db = np.sign(a[:, i] - a[:, j]), np.sign(b[:, i] - b[:, j])
    n0 = len(i)
    den = np.sqrt((n0 - (da == 0).sum(axis=1)) * (n0 - (db == 0).sum(axis=1)).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (da * db).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def _order(means: pd.Series) -> list[str]:
    return list(means.sort_values(ascending=False).index)


def rank_agreement(small: pd.DataFrame, large: pd.DataFrame, n_boot: int = 2000,
                   seed: int = 0) -> RankAgreement:
    """The rank agreement of the variants (columns) between ``small`` and ``large``: tables of
    ΔNE indexed by (world, seed), paired on that index (rows only one side has are dropped).

    The bootstrap draws the worlds with replacement, then within each drawn world its seeds
    with replacement, and ranks the variants by their mean over the drawn rows at each point.
    """
    cols = [c for c in small.columns if c in large.columns]
    if len(cols) < 3:
        raise ValueError(f"rank agreement needs at least 3 variants at both points, got {cols}")
    idx = small.index.intersection(large.index)
    if len(idx) == 0:
        raise ValueError("the two points share no (world, seed) row")
    s, lg = small.loc[idx, cols], large.loc[idx, cols]
    tau = _tau(s.mean().to_numpy(), lg.mean().to_numpy())
    rho = float(stats.spearmanr(s.mean(), lg.mean()).statistic)
    worlds = sorted(set(idx.get_level_values(0)))
    per_world = {int(w): _tau(s.loc[w].mean().to_numpy(), lg.loc[w].mean().to_numpy())
                 for w in worlds}
    rows = {w: np.flatnonzero(idx.get_level_values(0) == w) for w in worlds}
    sv, lv = s.to_numpy(), lg.to_numpy()
    rng = np.random.default_rng(seed)
    ms, ml = np.empty((n_boot, len(cols))), np.empty((n_boot, len(cols)))
    for b in range(n_boot):
        picked = np.concatenate([rng.choice(rows[w], size=len(rows[w]))
                                 for w in rng.choice(worlds, size=len(worlds))])
        ms[b], ml[b] = sv[picked].mean(axis=0), lv[picked].mean(axis=0)
    taus = tau_b_rows(ms, ml)
    same = np.argmax(ms, axis=1) == np.argmax(ml, axis=1)
    ok = taus[~np.isnan(taus)]
    lo, hi = (np.percentile(ok, [2.5, 97.5]) if len(ok) else (math.nan, math.nan))
    return RankAgreement(tau=tau, tau_lo=float(lo), tau_hi=float(hi),
                         p_positive=float((ok > 0).mean()) if len(ok) else math.nan, rho=rho,
                         per_world=per_world, order_small=_order(s.mean()),
                         order_large=_order(lg.mean()), same_best=float(same.mean()),
                         n_boot=n_boot, n_units=len(idx))


def verdict_agreement(small: pd.DataFrame, large: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per variant, a verdict column (e.g. ``kd_verdict``) of two points' summaries side by
    side and whether it is the same."""
    a = small.set_index("variant")[column]
    b = large.set_index("variant")[column]
    out = pd.DataFrame({"small": a, "large": b}).dropna()
    out["same"] = out["small"] == out["large"]
    return out

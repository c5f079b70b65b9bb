"""The generalized pivot of a mean whose variance is a known part plus a part estimated with few
degrees of freedom (Weerahandi's generalized p-value), on scipy.stats.

The standardized estimate is distributed as ``|Z| · sqrt(u + (1 − u) · ν / W)`` with Z standard
normal, W ~ χ²_ν and ``u`` the known part's share of the estimated variance: ``u = 0`` is
Student's t with ν df, ``u = 1`` the normal. scipy has no such distribution, so its tail is
``E_W[P(|Z| ≥ t / scale(W))]`` by quadrature on W's quantiles, and its critical value the root
of that tail (scipy.optimize's elementwise bracketing root finder).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import stats
from scipy.optimize import elementwise

#: quadrature nodes of χ²_ν (dense in the lower tail, where a small W makes a heavy tail)
NODES = 1024
#: shares u at which the critical value is solved once per (level, df), then interpolated
GRID = 257


@lru_cache(maxsize=32)
def chi2_nodes(df: float, n: int = NODES) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes and weights of χ²_df, ``E f(W) ≈ Σ weights · f(nodes)`` for a bounded f.

    Parameters
    ----------
    df
        The degrees of freedom (> 0).
    n
        The number of nodes.

    Returns
    -------
    (nodes, weights)
        The χ² quantiles at probabilities ``v³`` for v at the midpoints of n equal steps, and
        the weights ``3 v² / n`` normalized to sum to 1; both read-only (cached).
    """
    v = (np.arange(n) + 0.5) / n
    weights = 3 * v * v / n
    weights /= weights.sum()
    nodes = np.asarray(stats.chi2.ppf(v**3, df), dtype=np.float64)
    for a in (nodes, weights):
        a.setflags(write=False)
    return nodes, weights


def mixed_tail(t: np.ndarray | float, share: np.ndarray | float, df: float) -> np.ndarray:
    """``P(|Z| · sqrt(u + (1 − u) · df / W) ≥ |t|)``, the two-sided generalized p-value.

    Parameters
    ----------
    t
        Standardized estimates (the estimate over the square root of its estimated variance).
    share
        The known part's share ``u`` of that variance, clipped to [0, 1]; broadcast with t.
    df
        The degrees of freedom of the estimated part (W ~ χ²_df).

    Returns
    -------
    numpy.ndarray
        The p-values, shaped as ``t`` and ``share`` broadcast; nan where either is nan.
    """
    t, share = np.broadcast_arrays(np.abs(np.asarray(t, np.float64)),
                                   np.clip(np.asarray(share, np.float64), 0.0, 1.0))
    flat_t, flat_u = t.reshape(-1), share.reshape(-1)
    nodes, weights = chi2_nodes(float(df))
    inv_w = df / nodes
    out = np.empty(flat_t.shape)
    step = max(1, (1 << 22) // inv_w.size)  # bounded memory: a block of estimates × nodes
    for start in range(0, flat_t.size, step):
        tt, uu = flat_t[start:start + step, None], flat_u[start:start + step, None]
        scale = np.sqrt(uu + (1 - uu) * inv_w[None])
        out[start:start + step] = 2 * stats.norm.sf(tt / scale) @ weights
    out = np.where(np.isnan(flat_t) | np.isnan(flat_u), np.nan, out)
    return out.reshape(t.shape)


@lru_cache(maxsize=32)
def _mixed_table(level: float, df: float) -> tuple[np.ndarray, np.ndarray]:
    """The critical value of :func:`mixed_tail` on a grid of shares u in [0, 1]."""
    share = np.linspace(0.0, 1.0, GRID)
    alpha = 1.0 - level
    z = float(stats.norm.isf(alpha / 2))
    t_df = float(stats.t.isf(alpha / 2, df))
    # the critical value lies between the normal's (u = 1) and t_df's (u = 0)
    found = elementwise.find_root(lambda c, u: mixed_tail(c, u, df) - alpha,
                                  (z * (1 - 1e-9), t_df * (1 + 1e-6) + 1e-9), args=(share,))
    crit = np.asarray(found.x, dtype=np.float64)
    crit[0], crit[-1] = t_df, z  # exact ends
    share.setflags(write=False)
    crit.setflags(write=False)
    return share, crit


def mixed_critical(level: float, share: np.ndarray | float, df: float) -> np.ndarray:
    """The ``c`` with ``mixed_tail(c, share, df) = 1 − level``.

    Parameters
    ----------
    level
        The two-sided confidence level, in (0, 1).
    share
        The known part's share of the variance, clipped to [0, 1].
    df
        The degrees of freedom of the estimated part.

    Returns
    -------
    numpy.ndarray
        Critical values between the normal's and t_df's, interpolated on a grid of shares
        solved once per (level, df); nan where ``share`` is nan.

    Raises
    ------
    ValueError
        If ``level`` is not in (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    grid, crit = _mixed_table(float(level), float(df))
    share = np.asarray(share, np.float64)
    out = np.interp(np.clip(share, 0.0, 1.0), grid, crit)
    return np.where(np.isnan(share), np.nan, out)

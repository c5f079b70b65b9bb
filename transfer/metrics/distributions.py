"""The distributions behind the report's intervals, vectorized over numpy, without scipy.

* Student's t for real degrees of freedom: the two-sided tail is the regularized incomplete
  beta function, ``P(|T| > t) = I_x(ν/2, 1/2)`` with ``x = ν / (ν + t²)`` (its continued
  fraction, modified Lentz); the quantile by safeguarded Newton steps on that tail (~1e-12).
* χ² quantiles (the regularized incomplete gamma, inverted by bisection) as quadrature nodes.
* The generalized pivot of a mean whose variance is a known part plus a part estimated with few
  degrees of freedom (:func:`mixed_tail`, :func:`mixed_critical`; Weerahandi's generalized
  p-value): ``|Z| · sqrt(u + (1 − u) · ν / W)`` with Z standard normal, W ~ χ²_ν and ``u`` the
  known part's share of the estimated variance. ``u = 0`` is Student's t with ν df, ``u = 1``
  the normal.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

_LGAMMA = np.frompyfunc(math.lgamma, 1, 1)
_ERFC = np.frompyfunc(math.erfc, 1, 1)
_TINY = 1e-300


def _lgamma(x: np.ndarray) -> np.ndarray:
    return np.asarray(_LGAMMA(x), dtype=np.float64)


def _beta_cf(a: np.ndarray, b: np.ndarray, x: np.ndarray, iterations: int = 300) -> np.ndarray:
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf), elementwise."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < _TINY, _TINY, d)
    d = 1.0 / d
    h = d.copy()
    for m in range(1, iterations + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        step = d * c
        h *= step
        if np.all(np.abs(step - 1.0) < 1e-15):
            break
    return h


def betainc(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Regularized incomplete beta ``I_x(a, b)`` for a, b > 0 and x in [0, 1], elementwise."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, x)))
    inside = (x > 0) & (x < 1)
    xs = np.where(inside, x, 0.5)
    log_front = (_lgamma(a + b) - _lgamma(a) - _lgamma(b) + a * np.log(xs)
                 + b * np.log1p(-xs))
    front = np.exp(log_front)
    # the fraction converges fast below (a + 1) / (a + b + 2); above, I_x(a, b) = 1 - I_1-x(b, a)
    direct = xs < (a + 1.0) / (a + b + 2.0)
    fa, fb, fx = np.where(direct, a, b), np.where(direct, b, a), np.where(direct, xs, 1 - xs)
    part = front * _beta_cf(fa, fb, fx) / fa
    out = np.where(direct, part, 1.0 - part)
    return np.where(inside, out, np.where(x <= 0, 0.0, 1.0))


def two_sided_p(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """``P(|T_df| ≥ |t|)``; nan where t or df is nan or df ≤ 0; df = inf is the normal."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=np.float64),
                                np.asarray(df, dtype=np.float64))
    ok = np.isfinite(t) & (df > 0) & ~np.isnan(df)
    finite_df = np.where(np.isfinite(df) & ok, df, 1.0)
    x = finite_df / (finite_df + np.where(ok, t, 0.0) ** 2)
    p = betainc(finite_df / 2, np.full_like(x, 0.5), x)
    normal = np.asarray(_ERFC(np.abs(np.where(ok, t, 0.0)) / math.sqrt(2)), dtype=np.float64)
    p = np.where(np.isinf(df), normal, p)
    p = np.where(np.isinf(t) & (df > 0), 0.0, p)
    return np.where(ok | (np.isinf(t) & (df > 0)), p, np.nan)


def density(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """The t density at ``t`` with ``df`` degrees of freedom (finite df > 0)."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=np.float64),
                                np.asarray(df, dtype=np.float64))
    log_c = _lgamma((df + 1) / 2) - _lgamma(df / 2) - 0.5 * np.log(df * math.pi)
    return np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df))


def quantile(level: float, df: np.ndarray | float) -> np.ndarray | np.float64:
    """The two-sided critical value ``t`` with ``P(|T_df| ≤ t) = level`` (e.g. 4.303 for
    level 0.95, df 2; 1.960 for df = inf); nan where df is nan or ≤ 0.

    Newton's method on log t for ``log P(|T| ≥ t) = log(1 - level)`` from the Cornish–Fisher
    start, each step kept inside a bracket that bisection narrows when Newton would leave it."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    df = np.asarray(df, dtype=np.float64)
    alpha = 1.0 - level
    z = _normal_quantile(1 - alpha / 2)
    ok = df > 0
    nu = np.where(np.isfinite(df) & ok, df, 1.0)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    start = z + g1 / nu + g2 / nu ** 2 + g3 / nu ** 3
    lo = np.full_like(nu, math.log(z))  # t ≥ z always: the t has heavier tails
    hi = np.full_like(nu, math.log(1e12))
    u = np.clip(np.log(np.maximum(start, z)), lo, hi)
    finite = np.isfinite(df) & ok
    nu_f = np.where(finite, nu, 1.0)
    log_alpha = math.log(alpha)
    for _ in range(100):
        t = np.exp(u)
        p = betainc(nu_f / 2, np.full_like(nu_f, 0.5), nu_f / (nu_f + t * t))
        h = np.log(np.maximum(p, 1e-300)) - log_alpha  # falls as t rises
        lo = np.where(h > 0, u, lo)
        hi = np.where(h > 0, hi, u)
        slope = -2 * density(t, nu_f) * t / np.maximum(p, 1e-300)
        step = np.where(slope < 0, -h / slope, 0.0)
        new = u + step
        bad = ~((new > lo) & (new < hi)) | (slope >= 0)
        new = np.where(bad, (lo + hi) / 2, new)
        done = np.abs(new - u) < 1e-13
        u = new
        if np.all(done | ~finite):
            break
    t = np.where(finite, np.exp(u), z)
    out = np.where(ok, t, np.nan)
    return out if out.ndim else np.float64(out)


def _normal_quantile(q: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


def normal_tail2(x: np.ndarray) -> np.ndarray:
    """``P(|Z| ≥ x)`` for a standard normal Z, elementwise (x ≥ 0)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64) / math.sqrt(2))
    return torch.special.erfc(t).numpy()


def gammainc(a: float, x: np.ndarray) -> np.ndarray:
    """Regularized lower incomplete gamma ``P(a, x)`` for a > 0, x ≥ 0 (series below a + 1,
    continued fraction above), elementwise in x."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    pos = x > 0
    xs = np.where(pos, x, 1.0)
    log_front = -xs + a * np.log(xs) - math.lgamma(a)
    series = xs < a + 1
    # series: e^-x x^a / Γ(a + 1) · Σ x^n / ((a + 1)…(a + n))
    term = np.full_like(xs, 1.0 / a)
    total = term.copy()
    for n in range(1, 500):
        term = term * xs / (a + n)
        total += term
        if np.all(np.abs(term) < np.abs(total) * 1e-16):
            break
    low = np.exp(log_front) * total
    # continued fraction of Q(a, x) (modified Lentz)
    b = xs + 1.0 - a
    c = np.full_like(xs, 1.0 / _TINY)
    d = 1.0 / np.where(np.abs(b) < _TINY, _TINY, b)
    h = d.copy()
    for i in range(1, 500):
        an = -i * (i - a)
        b = b + 2.0
        d = an * d + b
        d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
        c = b + an / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        step = d * c
        h *= step
        if np.all(np.abs(step - 1.0) < 1e-15):
            break
    high = 1.0 - np.exp(log_front) * h
    out = np.where(series, low, high)
    return np.where(pos, np.clip(out, 0.0, 1.0), 0.0)


@lru_cache(maxsize=32)
def chi2_nodes(df: float, n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes and weights of χ²_df, ``E f(W) ≈ Σ weights · f(nodes)`` for a bounded
    f: the quantiles at probabilities ``v³`` for v at the midpoints of n equal steps (dense in
    the lower tail, where a small W makes a heavy tail), weighted by ``3 v² / n`` (normalized)."""
    v = (np.arange(n) + 0.5) / n
    u = v ** 3
    weights = 3 * v * v / n
    weights /= weights.sum()
    lo, hi = np.full(n, -200.0), np.full(n, math.log(max(50.0 * df, 100.0)))
    for _ in range(90):  # bisection on log x
        mid = (lo + hi) / 2
        below = gammainc(df / 2, np.exp(mid) / 2) < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    nodes = np.exp((lo + hi) / 2)
    for a in (nodes, weights):
        a.setflags(write=False)
    return nodes, weights


def mixed_tail(t: np.ndarray, share: np.ndarray, df: float) -> np.ndarray:
    """``P(|Z| · sqrt(u + (1 − u) · df / W) ≥ |t|)``: the two-sided generalized p-value of a
    standardized estimate ``t`` whose variance is a known share ``u`` plus a share ``1 − u``
    estimated with ``df`` degrees of freedom (W ~ χ²_df)."""
    t, share = np.broadcast_arrays(np.abs(np.asarray(t, np.float64)),
                                   np.clip(np.asarray(share, np.float64), 0.0, 1.0))
    flat_t, flat_u = t.reshape(-1), share.reshape(-1)
    nodes, weights = chi2_nodes(float(df))
    inv_w = df / nodes
    out = np.empty(flat_t.shape)
    step = max(1, (1 << 22) // inv_w.size)
    for start in range(0, flat_t.size, step):
        tt, uu = flat_t[start:start + step, None], flat_u[start:start + step, None]
        scale = np.sqrt(uu + (1 - uu) * inv_w[None])
        out[start:start + step] = normal_tail2(tt / scale) @ weights
    out = np.where(np.isnan(flat_t) | np.isnan(flat_u), np.nan, out)
    return out.reshape(t.shape)


@lru_cache(maxsize=32)
def _mixed_table(level: float, df: float, points: int = 257) -> tuple[np.ndarray, np.ndarray]:
    """The critical value of :func:`mixed_tail` on a grid of shares u in [0, 1]."""
    share = np.linspace(0.0, 1.0, points)
    alpha = 1.0 - level
    lo = np.full(points, float(_normal_quantile(1 - alpha / 2)))
    hi = np.full(points, float(quantile(level, df))) * 1.000001 + 1e-9
    for _ in range(42):
        mid = (lo + hi) / 2
        above = mixed_tail(mid, share, df) > alpha
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    crit = (lo + hi) / 2
    crit[0], crit[-1] = quantile(level, df), _normal_quantile(1 - alpha / 2)  # exact ends
    share.setflags(write=False)
    crit.setflags(write=False)
    return share, crit


def mixed_critical(level: float, share: np.ndarray, df: float) -> np.ndarray:
    """The ``c`` with ``mixed_tail(c, share, df) = 1 − level`` (between the normal's and
    t_df's critical values), interpolated on a 257-point grid of shares computed once per
    (level, df)."""
    grid, crit = _mixed_table(float(level), float(df))
    share = np.asarray(share, np.float64)
    out = np.interp(np.clip(share, 0.0, 1.0), grid, crit)
    return np.where(np.isnan(share), np.nan, out)

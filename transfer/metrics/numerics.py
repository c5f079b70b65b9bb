"""The ranking numerics, defined once: the probability clip, logit, binary entropy, log loss and
normalized entropy, for Python floats, numpy arrays and torch tensors alike.

Why one module: every caller agrees at p ∈ {0, 1} (an entropy of 0, never nan) and on the clip.
The conventions:

* ``EPS = 1e-7``: probabilities are clipped to ``[EPS, 1 - EPS]`` before a log. 1e-7 (not 1e-6)
  because it is the smallest that float32 still tells from 1 (``1 - 1e-7 < 1`` in float32),
  so a clipped p means the same in both precisions; the cost of a confident wrong p is then
  capped at ``-log(1e-7) ≈ 16.1`` nats.
* ``binary_entropy`` is 0 at p ∈ {0, 1} (its limit), never nan there; nan in → nan out, and a p
  outside [0, 1] gives nan.
* NE divides by that entropy, so NE is nan (undefined) where the base rate is 0, 1 or nan —
  never inf.

Inputs are returned in their own kind: a tensor for a tensor (on its device, in its dtype), an
array for an array, a float for a Python or numpy scalar.
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F

#: The probability clip of every log and logit: p is taken as ``min(max(p, EPS), 1 - EPS)``.
EPS: float = 1e-7

#: A float, a numpy array or a torch tensor; each function returns the kind it was given.
ArrayLike = TypeVar("ArrayLike", float, np.ndarray, torch.Tensor)


def _np(x: float | np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _out(value: np.ndarray) -> float | np.ndarray:
    """A float for a 0-d result (a scalar input), else the array."""
    return float(value) if np.ndim(value) == 0 else value


def clip_probability(p: ArrayLike, eps: float = EPS) -> ArrayLike:
    """``p`` clipped to ``[eps, 1 - eps]`` (nan stays nan): the one clip before every log."""
    if isinstance(p, torch.Tensor):
        return p.clamp(eps, 1.0 - eps)
    return _out(np.clip(_np(p), eps, 1.0 - eps))  # type: ignore[return-value]


def logit(p: ArrayLike, eps: float = EPS) -> ArrayLike:
    """``log(p / (1 - p))`` of the clipped ``p``: finite (about ±16.1) at p ∈ {0, 1}.

    ``eps=0`` gives the unclipped log-odds (±inf at the edges)."""
    if isinstance(p, torch.Tensor):
        q = p.clamp(eps, 1.0 - eps)
        return torch.log(q) - torch.log1p(-q)
    q = np.clip(_np(p), eps, 1.0 - eps)
    with np.errstate(divide="ignore"):
        return _out(np.log(q) - np.log1p(-q))  # type: ignore[return-value]


def binary_entropy(p: ArrayLike) -> ArrayLike:
    """H(p) = -p log p - (1-p) log(1-p) in nats, elementwise; exactly 0 at p ∈ {0, 1} (the
    limit), nan for nan or a p outside [0, 1]."""
    if isinstance(p, torch.Tensor):
        # xlogy is 0 at x = 0 (no 0 * log 0 = nan) and nan for a negative argument
        return -(torch.special.xlogy(p, p) + torch.special.xlogy(1 - p, 1 - p))
    a = _np(p)
    inside = (a > 0) & (a < 1)
    q = np.where(inside, a, 0.5)
    h = -(q * np.log(q) + (1 - q) * np.log(1 - q))
    edge = (a == 0) | (a == 1)
    return _out(np.where(inside, h, np.where(edge, 0.0, np.nan)))  # type: ignore[return-value]


def log_loss(y: ArrayLike, p: ArrayLike, eps: float = EPS) -> ArrayLike:
    """Elementwise binary log loss ``-(y log p + (1-y) log(1-p))`` in nats of the clipped ``p``,
    so a confident wrong p of exactly 0 or 1 costs ``-log(eps)`` instead of inf."""
    if isinstance(p, torch.Tensor):
        q = p.clamp(eps, 1.0 - eps)
        yt = torch.as_tensor(y, dtype=q.dtype, device=q.device)
        return -(yt * torch.log(q) + (1.0 - yt) * torch.log1p(-q))
    q = np.clip(_np(p), eps, 1.0 - eps)
    ya = _np(y)
    return _out(-(ya * np.log(q) + (1.0 - ya) * np.log1p(-q)))  # type: ignore[return-value]


def log_loss_from_logits(y: ArrayLike, x: ArrayLike) -> ArrayLike:
    """Elementwise binary log loss of logits ``x``: ``max(x, 0) - x·y + log(1 + e^-|x|)``, stable
    for any finite logit (no clip needed); torch's ``binary_cross_entropy_with_logits``."""
    if isinstance(x, torch.Tensor):
        yt = torch.as_tensor(y, dtype=x.dtype, device=x.device)
        return F.binary_cross_entropy_with_logits(x, yt, reduction="none")
    xa, ya = _np(x), _np(y)
    out = _out(np.maximum(xa, 0) - xa * ya + np.log1p(np.exp(-np.abs(xa))))
    return out  # type: ignore[return-value]  # float or array as given: the TypeVar cannot say


def ne_from_mean_loss(mean_loss: ArrayLike, base_rate: ArrayLike) -> ArrayLike:
    """NE = ``mean_loss / H(base_rate)``, elementwise (broadcasting); nan where the base rate is
    0, 1 or nan (entropy 0: NE undefined), never inf."""
    if isinstance(mean_loss, torch.Tensor) or isinstance(base_rate, torch.Tensor):
        loss = torch.as_tensor(mean_loss)
        h = binary_entropy(torch.as_tensor(base_rate, dtype=loss.dtype, device=loss.device))
        ok = h > 0
        ne = loss / torch.where(ok, h, torch.ones_like(h))
        return torch.where(ok, ne, torch.full_like(ne, math.nan))
    loss_a = _np(mean_loss)
    h = _np(binary_entropy(base_rate))
    ok = h > 0
    ne = np.where(ok, loss_a / np.where(ok, h, 1.0), np.nan)
    return _out(ne)  # type: ignore[return-value]


def normalized_entropy(y: ArrayLike, p: ArrayLike, base_rate: float | None = None,
                       eps: float = EPS) -> float:
    """NE of probabilities ``p`` on labels ``y`` (1-d, same length): mean clipped log loss over
    H(``base_rate``); without ``base_rate`` the labels' own mean. 1.0 = always predicting the
    base rate; nan for no rows or a base rate of 0 or 1."""
    if isinstance(p, torch.Tensor):
        yt = torch.as_tensor(y, dtype=torch.float64, device=p.device)
        losses = log_loss(yt, p.to(torch.float64), eps)
        n, mean_y = losses.numel(), (float(yt.mean()) if yt.numel() else math.nan)
        mean = float(losses.mean()) if n else math.nan
    else:
        ya = _np(y)
        la = np.atleast_1d(_np(log_loss(ya, _np(p), eps)))
        n, mean_y = la.size, (float(ya.mean()) if ya.size else math.nan)
        mean = float(la.mean()) if n else math.nan
    rate = mean_y if base_rate is None else float(base_rate)
    return float(ne_from_mean_loss(mean, rate))

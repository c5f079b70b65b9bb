"""Normalized entropy (DESIGN §6): log loss relative to always predicting the base rate.

NE = mean binary log loss / H(p̄), with H(p) = -p log p - (1-p) log(1-p). ``p̄`` should come from
the training data, so that NE compares models against the same fixed baseline on every eval
split; without it the evaluation labels' own mean is used. Lower is better, 1.0 = base rate.

Sums are accumulated in float64 so that millions of rows and a DDP all-reduce lose nothing.
"""

from __future__ import annotations

import math
from typing import Any, overload

import torch
from torchmetrics import Metric

from gemkd.transfer.metrics.numerics import (
    EPS,
    binary_entropy,
    log_loss,
    log_loss_from_logits,
    ne_from_mean_loss,
)

__all__ = ["NormalizedEntropy", "binary_entropy"]

_F64 = torch.float64


@overload
def _check_base_rate(base_rate: float, what: str = ...) -> float: ...
@overload
def _check_base_rate(base_rate: float | None, what: str = ...) -> float | None: ...
def _check_base_rate(base_rate: float | None, what: str = "base_rate") -> float | None:
    """Reject a base rate that is not a finite number in [0, 1] (0 and 1 are allowed: NE = nan)."""
    if base_rate is None:
        return None
    value = float(base_rate)
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{what} must be a number in [0, 1], got {base_rate!r}")
    return value


def _log_loss(
    preds: torch.Tensor, target: torch.Tensor, from_logits: bool, eps: float
) -> torch.Tensor:
    """Elementwise binary log loss in float64.

    Logits go through ``binary_cross_entropy_with_logits`` (stable for any finite logit).
    Probabilities are clamped to [eps, 1 - eps] first, so a confident wrong p of exactly 0 or 1
    costs -log(eps) instead of inf.
    """
    x = preds.to(_F64)
    y = target.to(_F64)
    if from_logits:
        return log_loss_from_logits(y, x)
    return log_loss(y, x, eps)


def _ne_from_sums(
    log_loss_sum: torch.Tensor,
    count: torch.Tensor,
    label_sum: torch.Tensor,
    base_rate: torch.Tensor | None = None,
) -> torch.Tensor:
    """NE from accumulated sums (broadcasting); nan where there are no samples or H(p̄) = 0.

    ``base_rate`` entries that are nan fall back to the cell's own label mean.
    """
    own_rate = label_sum / count.clamp_min(1)
    p = own_rate if base_rate is None else torch.where(base_rate.isnan(), own_rate, base_rate)
    ne = ne_from_mean_loss(log_loss_sum / count.clamp_min(1), p)
    return torch.where(count > 0, ne, torch.full_like(ne, math.nan))


def _check_binary(preds: torch.Tensor, target: torch.Tensor, from_logits: bool) -> None:
    """One host sync: targets must be 0/1 (nan is not), probabilities must lie in [0, 1]."""
    if preds.shape != target.shape:
        raise ValueError(
            f"preds and target shapes differ: {tuple(preds.shape)} vs {tuple(target.shape)}"
        )
    if not preds.is_floating_point():
        raise ValueError(f"preds must be a floating tensor, got {preds.dtype}")
    bad_target = ((target != 0) & (target != 1)).sum()
    bad_preds = torch.zeros_like(bad_target)
    if not from_logits:
        bad_preds = (~((preds >= 0) & (preds <= 1))).sum()
    n_target, n_preds = torch.stack([bad_target, bad_preds]).tolist()
    if n_target:
        raise ValueError(f"target must contain only 0 and 1; {n_target} values are neither")
    if n_preds:
        raise ValueError(
            f"with from_logits=False preds must be probabilities in [0, 1]; {n_preds} are not"
        )


class NormalizedEntropy(Metric):
    """Binary normalized entropy; see the module docstring.

    ``compute()`` returns nan (never raises) when no samples were seen or the base rate is 0 or 1
    (entropy 0: NE is undefined). With ``base_rate=None`` and all-zero labels that is the case.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    log_loss_sum: torch.Tensor
    count: torch.Tensor
    label_sum: torch.Tensor

    def __init__(
        self,
        base_rate: float | None = None,
        from_logits: bool = True,
        eps: float = EPS,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.base_rate = _check_base_rate(base_rate)
        self.from_logits = from_logits
        self.eps = eps
        self.validate_args = validate_args
        for name in ("log_loss_sum", "count", "label_sum"):
            self.add_state(name, default=torch.tensor(0.0, dtype=_F64), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch: ``preds`` logits (or probabilities), ``target`` 0/1, same shape."""
        preds, target = preds.detach(), target.detach()
        if self.validate_args:
            _check_binary(preds, target, self.from_logits)
        self.log_loss_sum += _log_loss(preds, target, self.from_logits, self.eps).sum()
        self.count += target.numel()
        self.label_sum += target.to(_F64).sum()

    def compute(self) -> torch.Tensor:
        """NE as a float64 scalar tensor (nan when undefined)."""
        base = None
        if self.base_rate is not None:
            base = torch.tensor(self.base_rate, dtype=_F64, device=self.count.device)
        return _ne_from_sums(self.log_loss_sum, self.count, self.label_sum, base)

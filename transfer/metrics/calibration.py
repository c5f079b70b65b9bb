"""Calibration (DESIGN §6): predicted clicks over actual clicks, Σp / Σy; 1.0 is perfect.

A ratio of sums (not a mean of ratios), so it merges exactly across batches and DDP ranks.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torchmetrics import Metric

from gemkd.transfer.metrics.ne import _check_binary

_F64 = torch.float64


def _calibration_from_sums(prob_sum: torch.Tensor, label_sum: torch.Tensor) -> torch.Tensor:
    """Σp / Σy, nan where Σy = 0 (no positives: over- and under-prediction are undefined)."""
    ok = label_sum > 0
    ratio = prob_sum / torch.where(ok, label_sum, torch.ones_like(label_sum))
    return torch.where(ok, ratio, torch.full_like(ratio, math.nan))


class Calibration(Metric):
    """Σp / Σy over everything seen; nan when there are no positive labels (or no samples)."""

    is_differentiable = False
    higher_is_better = None  # 1.0 is best; both directions are errors
    full_state_update = False

    prob_sum: torch.Tensor
    label_sum: torch.Tensor

    def __init__(self, from_logits: bool = True, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.from_logits = from_logits
        self.validate_args = validate_args
        for name in ("prob_sum", "label_sum"):
            self.add_state(name, default=torch.tensor(0.0, dtype=_F64), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch: ``preds`` logits (or probabilities, used unclamped), ``target`` 0/1."""
        preds, target = preds.detach(), target.detach()
        if self.validate_args:
            _check_binary(preds, target, self.from_logits)
        p = preds.to(_F64)
        if self.from_logits:
            p = torch.sigmoid(p)
        self.prob_sum += p.sum()
        self.label_sum += target.to(_F64).sum()

    def compute(self) -> torch.Tensor:
        """Σp / Σy as a float64 scalar tensor (nan when Σy = 0)."""
        return _calibration_from_sums(self.prob_sum, self.label_sum)

"""ROC AUC on top of torchmetrics, with the two edges it gets wrong for us fixed.

torchmetrics 1.9 ``BinaryAUROC``:

* returns 0.0 plus a UserWarning when the targets hold a single class (AUC is undefined: we
  want nan), and raises ``ValueError`` when it has seen no samples (we want nan);
* sigmoids each *batch* separately when any value in it lies outside [0, 1], so a stream of
  logits where one batch happens to fall inside [0, 1] is ranked inconsistently. We store raw
  scores (``normalization=None``): AUC only depends on their order, so logits and probabilities
  give the same answer and no sigmoid can saturate ties;
* keeps int64 targets, which breaks the DDP all-gather when a rank saw no batch (see update).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torchmetrics.classification import BinaryAUROC
from torchmetrics.functional.classification import binary_auroc
from torchmetrics.utilities.data import dim_zero_cat

from gemkd.transfer.metrics.ne import _check_binary


def _nan(device: torch.device) -> torch.Tensor:
    return torch.tensor(math.nan, dtype=torch.float32, device=device)


def _both_classes(target: torch.Tensor) -> bool:
    """True when ``target`` holds at least one 0 and one 1 (one host sync)."""
    if target.numel() == 0:
        return False
    return 0 < target.sum().item() < target.numel()


def binary_auc(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """ROC AUC of any scores (logits or probabilities) against 0/1 targets; nan if undefined.

    Scores are replaced by their dense ranks before calling torchmetrics' ``binary_auroc``, so
    ties are kept exactly and its logits-or-probabilities guess never applies a sigmoid.
    """
    scores = scores.detach().flatten()
    target = target.detach().flatten()
    if not _both_classes(target):
        return _nan(scores.device)
    _, dense_rank = torch.unique(scores, sorted=True, return_inverse=True)
    unit = dense_rank.to(torch.float64) / scores.numel()  # order-preserving, inside [0, 1)
    return binary_auroc(unit, target.long(), validate_args=False).float()


class SafeBinaryAUROC(BinaryAUROC):
    """``BinaryAUROC`` (exact, unbinned) that returns nan instead of 0.0/raising when undefined.

    ``update(preds, target)``: ``preds`` logits or probabilities (any monotone score), ``target``
    0/1 of any dtype. ``compute()`` is nan with no samples or a single class. ``BinaryAUROC``
    itself skips tensor validation (it hard-codes ``validate_args=False`` for its parent), so
    ``validate_args`` here checks targets are 0/1 (one host sync per update).
    """

    def __init__(self, validate_args: bool = True, **kwargs: Any) -> None:
        for fixed in ("thresholds", "normalization", "ignore_index"):
            if fixed in kwargs:
                raise TypeError(f"SafeBinaryAUROC does not accept {fixed!r}")
        super().__init__(thresholds=None, normalization=None, **kwargs)
        self.check_inputs = validate_args

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Store raw scores and targets, both as float32.

        float32 for both because torchmetrics stands in an empty *float32* tensor for a DDP rank
        that saw no batch; an int64 target state there makes gloo abort the all-gather.
        """
        preds, target = preds.detach(), target.detach()
        if self.check_inputs:
            _check_binary(preds, target, from_logits=True)
        super().update(preds.float(), target.float())

    # (BinaryAUROC's compute returns the AUC over its parent's curve tuple, ignored there too)
    def compute(self) -> torch.Tensor:  # type: ignore[override]
        """AUC as a scalar tensor; nan when there are no samples or only one class."""
        if isinstance(self.target, list) and not self.target:
            return _nan(self.device)
        if not _both_classes(dim_zero_cat(self.target)):
            return _nan(self.device)
        return super().compute()

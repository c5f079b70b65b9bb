"""Embedding distillation (FitNets, Romero et al. 2015) as a gemkd transfer method.

The teacher's stored representation (the store's ``emb``, e.g. GEM's ``trunk``) is a richer
target than its logits: a small projection of the student's embedding is regressed onto it, so
the student's trunk learns the teacher's geometry, not only its scores. Both sides are
layer-normalised (no learned scale), so the loss compares directions and relative magnitudes and
does not depend on the teacher's scale. Rows without a teacher row get no loss.
"""

from __future__ import annotations

from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from gemkd.transfer.methods import MethodContext, StepState, TransferMethod
from gemkd.transfer.methods.losses import masked_mean
from gemkd.transfer.models import StudentOutput


class EmbeddingKD(TransferMethod):
    """``emb_weight · ‖LN(W · e_student) − LN(e_teacher)‖² / E`` per row, masked.

    ``emb_weight`` is tuned from ``[0.1, 1.0]`` unless the spec fixes it (a plain list is a
    choice; a range, ``gemkd.transfer.methods.LogUniform(0.01, 1.0, default=0.1)``, would let the
    search look between and flag a choice at its edge); ``hidden`` > 0 puts a hidden layer in
    the projection (a FitNets "regressor")."""

    needs = frozenset({"teacher_emb"})
    tunable: ClassVar[dict[str, list]] = {"emb_weight": [0.1, 1.0]}

    def __init__(self, emb_weight: float = 1.0, hidden: int = 0) -> None:
        super().__init__()
        if emb_weight < 0 or hidden < 0:
            raise ValueError("emb_weight and hidden must be >= 0")
        self.emb_weight, self.hidden = float(emb_weight), int(hidden)
        self.proj: nn.Module | None = None

    def setup(self, ctx: MethodContext) -> None:
        width, target = ctx.embedding_width(), ctx.teacher.emb_dim
        self.proj = (nn.Linear(width, target) if not self.hidden else
                     nn.Sequential(nn.Linear(width, self.hidden), nn.ReLU(),
                                   nn.Linear(self.hidden, target)))

    def loss(self, step: StepState, out: StudentOutput) -> dict[str, Tensor]:
        if self.emb_weight == 0:
            return {}
        if out.embedding is None:
            raise ValueError("EmbeddingKD needs StudentOutput.embedding")
        teacher = step.teacher
        pred = self.proj(out.embedding)
        target = teacher.emb
        pred = F.layer_norm(pred, pred.shape[-1:])
        target = F.layer_norm(target, target.shape[-1:])
        per_row = (pred - target).pow(2).mean(dim=-1, keepdim=True)
        value = masked_mean(per_row, teacher.found)
        step.log("train/emb_kd_loss", value)
        return {"emb_kd": self.emb_weight * value}

"""Plain knowledge distillation (Hinton et al.; DESIGN §5): the baseline every method is
compared against. ``L = BCE(σ(z_s), y) + λ·T²·BCE(σ(z_s/T), σ(z_t/T))`` per task, or logit MSE."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from transfer.methods.base import StepState, TransferMethod
from transfer.methods.losses import KD_LOSSES, masked_mean
from transfer.models import StudentOutput


class KD(TransferMethod):
    """``kd_weight`` λ (0 = labels only), ``temperature`` T, ``loss`` ``bce`` (soft targets,
    T²-scaled) or ``mse`` (logit matching). The loss applies to the serving logits, or to the
    distillation head a method or the student names (``StepState.distill_logits``), scaled by its
    ``distill_weight``; its target is the teacher's logits or what a method realigned them to."""

    needs = frozenset({"teacher"})
    provides = frozenset({"kd_loss"})
    tunable: ClassVar[dict[str, list]] = {"kd_weight": [0.5, 1.0, 2.0, 4.0, 8.0],
                                          "temperature": [1.0]}

    def __init__(self, kd_weight: float = 1.0, temperature: float = 1.0,
                 loss: str = "bce") -> None:
        super().__init__()
        if loss not in KD_LOSSES:
            raise ValueError(f"kd loss {loss!r}: expected one of {sorted(KD_LOSSES)}")
        if temperature <= 0 or kd_weight < 0:
            raise ValueError("kd temperature must be > 0 and kd_weight >= 0")
        self.kd_weight, self.temperature, self.kd_loss = float(kd_weight), float(temperature), loss

    def loss(self, step: StepState, out: StudentOutput) -> dict[str, Tensor]:
        if self.kd_weight == 0:
            return {}
        target, found = step.kd_target()
        kd_fn = KD_LOSSES[self.kd_loss]
        if step.distill_logits is not None:
            value = step.distill_weight * masked_mean(
                kd_fn(step.distill_logits, target, temperature=self.temperature), found)
        else:
            value = masked_mean(kd_fn(out.logits, target, temperature=self.temperature), found)
        step.log("train/kd_loss", value)
        return {"kd": self.kd_weight * value}

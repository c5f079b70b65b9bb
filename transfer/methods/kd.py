"""Plain knowledge distillation (Hinton et al.; DESIGN §5): the baseline every method is
compared against, per task, in one of two forms:

- convex (``alpha``, the tuned default): ``L = (1 − α)·BCE(σ(z_s), y) + α·T²·BCE(σ(z_s/T),
  σ(z_t/T))``, α ∈ [0, 1]: α = 0 is labels only, α = 1 pure distillation. Both ends are true
  limits, so the search can reach KD's optimum and a choice at an end is an answer, not a
  range too narrow (λ's open grid ended at its top twice: DESIGN §6 "Fair comparison");
- additive (``kd_weight`` λ): ``L = BCE(σ(z_s), y) + λ·T²·BCE(...)`` — the same family up to the
  loss scale (λ = α / (1 − α)), kept for specs that tune or fix λ.

``loss: mse`` replaces the soft-target BCE by logit MSE (``temperature`` then does nothing).
``loss: bce_cal`` is the soft-target BCE whose temperature leaves the student's mean probability
to the untempered target (:func:`~gemkd.transfer.methods.losses.kd_bce_calibrated`): at T > 1
plain KD's student settles at the tempered targets' mean and under-predicts a teacher around
p ≈ 0.1 (0.83× its mean at T = 4 for a student whose logits spread less than the teacher's:
tests/transfer/methods/test_kd_cal.py); ``bce_cal``'s stays at the teacher's (or the Student
Adapter's) mean at every T, and equals ``bce`` at T = 1.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from gemkd.transfer.methods.base import BUILTIN_METHODS, StepState, TransferMethod
from gemkd.transfer.methods.losses import KD_LOSSES, masked_mean
from gemkd.transfer.methods.space import LogUniform, Range, Uniform
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.packs.member_wise import member_wise


@BUILTIN_METHODS.register("kd")
class KD(TransferMethod):
    """``alpha`` α (convex form) or ``kd_weight`` λ (additive form; the default, λ = 1, when
    neither is given), ``temperature`` T, ``loss`` ``bce`` (soft targets, T²-scaled), ``bce_cal``
    (the same, the student's mean probability kept at the target's) or ``mse`` (logit
    matching). The loss applies to the serving logits, or to the distillation head a
    method or the student names (``StepState.distill_logits``), scaled by its
    ``distill_weight``; its target is the teacher's logits or what a method realigned them to.
    In the convex form the serving head's label loss is scaled by 1 − α through
    ``StepState.label_weight`` (multiplied, so it composes with the auxiliary head's scale).

    Tuned ranges: ``alpha`` Uniform(0, 1), both ends natural; ``temperature`` LogUniform(1, 8),
    1 natural (the teacher's own calibrated probabilities: below it the binary soft target
    hardens toward the 0/1 label the label term already gives), 8 not (there the soft-target
    gradient ``T·(σ(z_s/T) − σ(z_t/T))`` is within ~6 % of logit matching for ads logits
    around −4: a choice at 8 says try ``loss: mse``); ``kd_weight`` LogUniform(0.1, 100), tuned
    instead of ``alpha`` only when the spec names it."""

    needs = frozenset({"teacher"})
    provides = frozenset({"kd_loss"})
    stacks = True
    spec_defaults: ClassVar[dict[str, str]] = {"loss": "kd_loss"}  # the spec's kd_loss
    tunable: ClassVar[dict[str, Range | list[Any]]] = {
        "alpha": Uniform(0.0, 1.0, default=0.5, natural_low=True, natural_high=True),
        "kd_weight": LogUniform(0.1, 100.0, default=1.0, alternative_to="alpha"),
        "temperature": LogUniform(1.0, 8.0, default=1.0, natural_low=True),
    }

    def __init__(self, kd_weight: float | None = None, temperature: float = 1.0,
                 loss: str = "bce", alpha: float | None = None) -> None:
        super().__init__()
        if loss not in KD_LOSSES:
            raise ValueError(f"kd loss {loss!r}: expected one of {sorted(KD_LOSSES)}")
        if alpha is not None and kd_weight is not None:
            raise ValueError(f"kd takes alpha (the convex form) or kd_weight (λ), not both: got "
                             f"alpha={alpha}, kd_weight={kd_weight}")
        if alpha is not None and not 0 <= alpha <= 1:
            raise ValueError(f"kd alpha must be in [0, 1], got {alpha}")
        if kd_weight is None:
            kd_weight = 1.0
        if temperature <= 0 or kd_weight < 0:
            raise ValueError("kd temperature must be > 0 and kd_weight >= 0")
        self.alpha = None if alpha is None else float(alpha)
        #: the distillation term's weight: α in the convex form, λ in the additive one (a
        #: tensor, one value per member, in a batched pack)
        self.kd_weight: float | Tensor = float(kd_weight) if alpha is None else float(alpha)
        self.temperature, self.kd_loss = float(temperature), loss

    def before_student(self, step: StepState) -> None:
        if self.alpha is not None:
            step.label_weight *= 1.0 - self.alpha

    def loss(self, step: StepState, out: StudentOutput) -> dict[str, Tensor]:
        if not isinstance(self.kd_weight, Tensor) and self.kd_weight == 0:
            return {}
        target, found = step.kd_target()
        kd_fn = KD_LOSSES[self.kd_loss]

        def kd(logits: Tensor, target: Tensor, temperature: float | Tensor) -> Tensor:
            return masked_mean(kd_fn(logits, target, temperature=temperature, found=found),
                               found)

        # a stacked pack's members one at a time, the loss and its mean (member_wise: each
        # member's numbers its run's)
        if step.distill_logits is not None:
            value = _scaled(step.distill_weight,
                            member_wise(kd, step.distill_logits, target, self.temperature))
        else:
            value = member_wise(kd, out.logits, target, self.temperature)
        step.log("train/kd_loss", value)
        return {"kd": _scaled(self.kd_weight, value)}


def _scaled(weight: float | Tensor, value: Tensor) -> Tensor:
    """``weight · value``; at weight 1 (the default λ and auxiliary weight) ``value`` itself:
    ``1 · x`` is ``x`` bit for bit, and so is its gradient, so the op and its backward go. A
    tensor weight (a pack's per-member knob, float64) is always multiplied, cast to
    ``value``'s dtype first as torch casts a Python float: a float64 0-dim tensor times a 0-dim
    float32 loss would compute (and return) float64, another value than the run's."""
    if isinstance(weight, Tensor):
        return weight.to(value.dtype) * value
    return value if weight == 1.0 else weight * value

"""The auxiliary distillation head as a transfer method (ExFM, DESIGN §5)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from gemkd.adapters.aux_head import AuxDistillHead
from gemkd.transfer.methods import MethodContext, StepState, TransferMethod
from gemkd.transfer.methods.base import BUILTIN_METHODS
from gemkd.transfer.methods.space import LogUniform, Range
from gemkd.transfer.models import StudentOutput


@BUILTIN_METHODS.register("aux_head")
class AuxHead(TransferMethod):
    """A separate head ``ŷ_D`` on the student's embedding takes the distillation loss, so the
    serving head ``ŷ_S`` trains on labels only. ``aux_beta`` β scales the head's gradient into
    the student's trunk (identity forward, ×β backward); ``aux_weight`` w scales the
    distillation loss on the head; ``label_weight`` scales the serving head's label loss
    (multiplying ``StepState.label_weight``: it composes with KD's convex form); ``hidden`` > 0
    gives the head a hidden layer. Only ``ŷ_S`` is evaluated and served.

    Tuned: ``aux_beta`` LogUniform(0.1, 10), default 1 — a gradient scale, so log-uniform,
    two decades around 1 (a list [0.5, 1] chooses its top, 1, on most datasets); neither
    bound is natural (β → 0 cuts the teacher off the trunk, labels only)."""

    requires = frozenset({"kd_loss"})
    stacks = True
    tunable: ClassVar[dict[str, Range | list[Any]]] = {
        "aux_beta": LogUniform(0.1, 10.0, default=1.0)}

    def __init__(self, aux_beta: float = 1.0, aux_weight: float = 1.0,
                 label_weight: float = 1.0, hidden: int = 0) -> None:
        super().__init__()
        if aux_beta < 0 or aux_weight < 0 or label_weight < 0 or hidden < 0:
            raise ValueError("aux_beta, aux_weight, label_weight and hidden must be >= 0")
        self.aux_beta, self.aux_weight, self.label_weight = aux_beta, aux_weight, label_weight
        self.hidden = hidden
        self.head: AuxDistillHead | None = None

    def setup(self, ctx: MethodContext) -> None:
        self.head = AuxDistillHead(ctx.embedding_width(), len(ctx.tasks), beta=self.aux_beta,
                                   hidden=self.hidden)

    def init_output_bias(self, logit) -> None:
        """The head predicts the teacher, calibrated near the base rate: starting it at p = 0.5
        would send a calibration gradient (×β) into the student's trunk on the first steps."""
        if self.head is not None:
            last = self.head.net[-1]
            assert isinstance(last, nn.Linear)  # the head's output layer
            with torch.no_grad():
                last.bias.copy_(logit)

    def before_student(self, step: StepState) -> None:
        step.label_weight *= self.label_weight

    def after_forward(self, step: StepState, out: StudentOutput) -> None:
        if out.distill_logits is not None:  # the student brings its own distillation head
            step.distill_weight = self.aux_weight
            return
        if out.embedding is None:
            raise ValueError("the auxiliary head needs StudentOutput.embedding")
        assert self.head is not None, "setup() builds the head"
        step.distill_logits = self.head(out.embedding)
        step.distill_weight = self.aux_weight

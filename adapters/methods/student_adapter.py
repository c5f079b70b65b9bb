"""The Student Adapter as a transfer method (ExFM, DESIGN §5): realign a stale teacher's logits
with the student's fresh labels before the student distils from them."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from adapters.student_adapter import StudentAdapter
from transfer.methods import MethodContext, StepState, TransferMethod
from transfer.methods.losses import masked_mean

OBJECTIVES = ("bce", "brier")
OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


class Adapter(TransferMethod):
    """``z_SA = g(z_t, domain, staleness)`` trained on the batch's fresh labels, updated first at
    every step with its own optimiser; the KD target becomes ``stopgrad(z_SA)``.

    ``adapter_hidden`` the MLP's width; ``adapter_lr`` its learning rate; ``optimizer`` adam |
    adamw | sgd; ``objective`` bce (log loss of σ(z_SA) against y) | brier (squared error of the
    probability); ``domain_dim`` the domain embedding's width; ``use_staleness`` feeds
    ``log1p(batch.day - trained_until_day)``."""

    needs = frozenset({"teacher"})
    requires = frozenset({"kd_loss"})
    tunable: ClassVar[dict[str, list]] = {"adapter_hidden": [16]}

    def __init__(self, adapter_hidden: int = 16, adapter_lr: float = 1e-2,
                 optimizer: str = "adam", objective: str = "bce", domain_dim: int = 4,
                 use_staleness: bool = True) -> None:
        super().__init__()
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
        if adapter_lr <= 0:
            raise ValueError(f"adapter_lr must be > 0, got {adapter_lr}")
        self.adapter_hidden, self.adapter_lr = int(adapter_hidden), float(adapter_lr)
        self.optimizer_name, self.objective = optimizer, objective
        self.domain_dim, self.use_staleness = domain_dim, use_staleness
        self.adapter: StudentAdapter | None = None
        self._opt: torch.optim.Optimizer | None = None

    def setup(self, ctx: MethodContext) -> None:
        self.adapter = StudentAdapter(len(ctx.tasks), len(ctx.domains), hidden=self.adapter_hidden,
                                      domain_dim=self.domain_dim,
                                      use_staleness=self.use_staleness)

    def param_groups(self, lr: float) -> list[dict]:
        return []  # trained by its own optimiser, not the student's

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        kwargs = {"foreach": True} if self.optimizer_name != "sgd" else {}
        self._opt = OPTIMIZERS[self.optimizer_name](self.adapter.parameters(),
                                                    lr=self.adapter_lr, **kwargs)
        return [self._opt]

    def _objective(self, z: Tensor, y: Tensor) -> Tensor:
        if self.objective == "bce":
            return F.binary_cross_entropy_with_logits(z, y, reduction="none")
        return (torch.sigmoid(z) - y).pow(2)

    def before_student(self, step: StepState) -> None:
        t, batch = step.teacher, step.batch
        z = self.adapter(t.logits, batch.domain, step.staleness)
        a_loss = masked_mean(self._objective(z, batch.labels), t.found)
        # a tiny fp32 MLP: plain autograd and its raw optimizer, as Lightning's per-step
        # wrappers (closure, hooks, precision plugin) cost more than the adapter itself
        opt = getattr(self._opt, "optimizer", self._opt)
        opt.zero_grad(set_to_none=True)
        a_loss.backward()
        opt.step()
        step.log("train/adapter_loss", a_loss)
        with torch.no_grad():
            step.kd_logits = self.adapter(t.logits, batch.domain, step.staleness)

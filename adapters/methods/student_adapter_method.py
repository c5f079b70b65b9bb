"""The Student Adapter as a transfer method (ExFM, DESIGN §5): realign a stale teacher's logits
with the student's fresh labels before the student distils from them."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from gemkd.adapters.student_adapter import StudentAdapter
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import MethodContext, StepState, TransferMethod
from gemkd.transfer.methods.base import BUILTIN_METHODS
from gemkd.transfer.methods.losses import masked_mean
from gemkd.transfer.methods.space import IntRange, Range
from gemkd.transfer.packs.member_wise import member_wise

OBJECTIVES = ("bce", "brier")
OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
UPDATES = ("fused", "separate")


@BUILTIN_METHODS.register("adapter")
class Adapter(TransferMethod):
    """``z_SA = g(z_t, domain, staleness[, features])`` trained on the batch's fresh labels; the
    KD target becomes ``stopgrad(z_SA)``.

    ``adapter_hidden`` the MLP's width; ``adapter_lr`` its learning rate; ``objective`` bce (log
    loss of σ(z_SA) against y) | brier (squared error of the probability); ``domain_dim`` the
    width of the domain (and feature) embeddings; ``use_staleness`` feeds
    ``log1p(batch.day - trained_until_day)``; ``features`` names categorical features of the
    example the adapter also sees (e.g. ``[ad_category]``: a per-segment correction).

    ``update``: ``fused`` (default) adds the adapter's loss to the student's step — one backward
    and one optimiser step for both, the adapter in its own parameter group (Adam at
    ``adapter_lr``; ``optimizer`` must be adam) — with the KD target taken from the adapter
    *before* that step, i.e. one step stale; ``separate`` updates the adapter first with its own
    ``optimizer`` (adam | adamw | sgd) and a backward of its own, then distils from the updated
    adapter (ExFM's order, ~2 extra passes of a tiny MLP per step: measured 1.6× a labels-only
    epoch for a small student, against ~1.1× fused).

    Tuned: ``adapter_hidden`` IntRange(4, 64, log=True), default 16 — a width, so log-scaled; the
    adapter maps a few logits (+ domain, staleness) to a few logits, and 4–64 spans too small
    to fit a per-domain correction up to more than its inputs can use."""

    needs = frozenset({"teacher"})
    requires = frozenset({"kd_loss"})
    stacks = True  # (update: separate has an optimiser of its own: a pack refuses it anyway)
    tunable: ClassVar[dict[str, Range | list[Any]]] = {
        "adapter_hidden": IntRange(4, 64, log=True, default=16)}

    def __init__(self, adapter_hidden: int = 16, adapter_lr: float = 1e-2,
                 optimizer: str = "adam", objective: str = "bce", domain_dim: int = 4,
                 use_staleness: bool = True, features: list[str] | None = None,
                 update: str = "fused") -> None:
        super().__init__()
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
        if update not in UPDATES:
            raise ValueError(f"update {update!r}: expected one of {', '.join(UPDATES)}")
        if update == "fused" and optimizer != "adam":
            raise ValueError("update 'fused' trains the adapter with the student's Adam(W): "
                             "optimizer must be adam (or use update: separate)")
        if adapter_lr <= 0 or adapter_hidden < 1:
            raise ValueError(f"adapter_lr must be > 0 and adapter_hidden >= 1, got "
                             f"{adapter_lr}, {adapter_hidden}")
        self.adapter_hidden, self.adapter_lr = int(adapter_hidden), float(adapter_lr)
        self.optimizer_name, self.objective, self.update = optimizer, objective, update
        self.domain_dim, self.use_staleness = domain_dim, use_staleness
        self.feature_names = list(features or [])
        self.feature_cols: list[int] = []
        self.adapter: StudentAdapter | None = None
        self._opt: torch.optim.Optimizer | None = None
        self._pending: Tensor | None = None

    def setup(self, ctx: MethodContext) -> None:
        names = [f.name for f in ctx.schema.categorical]
        unknown = [f for f in self.feature_names if f not in names]
        if unknown:
            raise ConfigError(f"method {self.name}: feature {unknown[0]!r} is not a categorical "
                              f"feature of the dataset ({', '.join(names)})")
        self.feature_cols = [names.index(f) for f in self.feature_names]
        rows = [min(ctx.schema.categorical[c].cardinality, 100_000) for c in self.feature_cols]
        self.adapter = StudentAdapter(len(ctx.tasks), len(ctx.domains),
                                      hidden=self.adapter_hidden, domain_dim=self.domain_dim,
                                      use_staleness=self.use_staleness, feature_rows=rows)

    def _built(self) -> StudentAdapter:
        if self.adapter is None:
            raise RuntimeError(f"method {self.name}: setup() builds the adapter")
        return self.adapter

    def param_groups(self, lr: float) -> list[dict]:
        if self.update == "separate":
            return []  # trained by its own optimiser, not the student's
        return [{"name": self.name, "params": list(self._built().parameters()),
                 "lr": self.adapter_lr, "weight_decay": 0.0}]

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        if self.update == "fused":
            return []
        kwargs = {"foreach": True} if self.optimizer_name != "sgd" else {}
        self._opt = OPTIMIZERS[self.optimizer_name](self._built().parameters(),
                                                    lr=self.adapter_lr, **kwargs)
        return [self._opt]

    def _objective(self, z: Tensor, y: Tensor, found: Tensor | None) -> Tensor:
        """The objective's mean over the found rows (labels [B, T] for a stacked pack's z
        [K, B, T]: a member at a time, member_wise, its value and gradient its run's)."""
        return member_wise(lambda zk: masked_mean(self._objective_of(zk, y), found), z)

    def _objective_of(self, z: Tensor, y: Tensor) -> Tensor:
        if self.objective == "bce":
            return F.binary_cross_entropy_with_logits(z, y.expand_as(z), reduction="none")
        return (torch.sigmoid(z) - y).pow(2)

    def _forward(self, step: StepState) -> Tensor:
        batch = step.batch
        feats = batch.categorical[:, self.feature_cols] if self.feature_cols else None
        return self._built()(step.teacher.logits, batch.domain, step.staleness, feats)

    @torch.no_grad()
    def adapted_logits(self, step: StepState) -> Tensor:
        """The adapter's current output for the step's batch (no training): what the student
        would distil from (:mod:`gemkd.adapters.learned_map` reads it)."""
        return self._forward(step)

    def before_student(self, step: StepState) -> None:
        t = step.teacher
        z = self._forward(step)
        a_loss = self._objective(z, step.batch.labels, t.found)
        step.log("train/adapter_loss", a_loss)
        if self.update == "fused":
            self._pending = a_loss
            step.kd_logits = z.detach()
            return
        # a tiny fp32 MLP: plain autograd and its raw optimizer, as Lightning's per-step
        # wrappers (closure, hooks, precision plugin) cost more than the adapter itself
        opt = getattr(self._opt, "optimizer", self._opt)
        assert opt is not None, "configure_optimizers() makes the adapter's optimiser"
        opt.zero_grad(set_to_none=True)
        a_loss.backward()
        opt.step()
        with torch.no_grad():
            step.kd_logits = self._forward(step)

    def loss(self, step: StepState, out) -> dict[str, Tensor]:
        if self._pending is None:
            return {}
        pending, self._pending = self._pending, None
        return {"adapter": pending}

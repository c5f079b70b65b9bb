"""Lightning module that trains a student from labels and a teacher store (DESIGN §5).

One step, in order: (1) look up the teacher's logits for the batch (rows without a teacher row
get no KD loss); (2) with a Student Adapter, update it on the batch's fresh labels and take
``stopgrad(z_SA)`` as the KD target; (3) update the student on ``α·BCE(serving, y)`` plus the KD
loss on the serving head (plain KD) or on a distillation head (auxiliary head, whose gradient
into the trunk is scaled by β inside the head). Students stream once through time-ordered days.
Evaluation is inherited from ``RankingModule``: only the serving head is measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transfer.data.batch import Batch
from transfer.distill.losses import KD_LOSSES, masked_mean
from transfer.distill.student import StudentOutput
from transfer.training.ranking_module import RankingModule

# batch -> (teacher logits [B, T] in the student's task order, found [B] bool)
TeacherFn = Callable[[Batch], tuple[Tensor, Tensor]]


@dataclass
class KDConfig:
    """``weight`` λ (0 = labels only), ``temperature`` T, ``loss`` bce|mse, ``label_weight`` α
    (scale of the serving head's label loss), ``aux_weight`` w (scale of the auxiliary head's KD
    loss, on top of λ)."""

    weight: float = 0.0
    temperature: float = 1.0
    loss: str = "bce"
    label_weight: float = 1.0
    aux_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.loss not in KD_LOSSES:
            raise ValueError(f"kd loss {self.loss!r}: expected one of {sorted(KD_LOSSES)}")
        if self.temperature <= 0 or self.weight < 0:
            raise ValueError("kd temperature must be > 0 and weight >= 0")


class DistillModule(RankingModule):
    """``student`` follows the Student protocol; ``teacher``, ``aux_head``, ``adapter`` and
    ``features`` are optional objects built by the pipeline (``features`` maps a batch to
    ``[B, F]`` representation features; an ``nn.Module`` there is trained with the student)."""

    hparams_ignore = ("model", "student", "teacher", "aux_head", "adapter", "features")

    def __init__(self, student: nn.Module, tasks: list[str], domains: list[str], *,
                 kd: KDConfig | None = None, teacher: TeacherFn | None = None,
                 aux_head: nn.Module | None = None, adapter: nn.Module | None = None,
                 adapter_lr: float = 1e-2, features: Callable[[Batch], Tensor] | None = None,
                 trained_until_day: int | None = None, **ranking_args: Any) -> None:
        super().__init__(student, tasks, domains, **ranking_args)
        self.kd = kd or KDConfig()
        if (aux_head is not None or adapter is not None) and teacher is None:
            raise ValueError("an auxiliary head or a Student Adapter needs a teacher")
        self.teacher = teacher
        self.aux_head = aux_head
        self.adapter = adapter
        self.adapter_lr = adapter_lr
        self.features = features
        self.trained_until_day = trained_until_day
        self.automatic_optimization = False

    # ------------------------------------------------------------------ forward
    def student_output(self, batch: Batch) -> StudentOutput:
        feats = self.features(batch) if self.features is not None else None
        if feats is not None:  # feature lookups (code stores) answer on the host
            feats = feats.to(batch.labels.device, non_blocking=True)
        out = self.model(batch, feats) if feats is not None else self.model(batch)
        if not isinstance(out, StudentOutput):
            raise TypeError(f"{type(self.model).__name__}.forward must return a StudentOutput, "
                            f"got {type(out).__name__}")
        return out

    def serving_logits(self, batch: Batch) -> Tensor:
        return self.student_output(batch).logits

    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> dict:
        return {"example_id": batch.example_id, "logits": self.serving_logits(batch).detach()}

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        student = super().configure_optimizers()
        extra = [m for m in (self.aux_head, self.features) if isinstance(m, nn.Module)]
        for m in extra:
            params = [p for p in m.parameters() if p.requires_grad]
            if params:
                student.add_param_group({"name": type(m).__name__, "params": params,
                                         "lr": self.lr, "weight_decay": 0.0})
        if self.adapter is None:
            return [student]
        return [student, torch.optim.Adam(self.adapter.parameters(), lr=self.adapter_lr,
                                          foreach=True)]

    def _staleness(self, batch: Batch) -> Tensor | None:
        if self.trained_until_day is None:
            return None
        return (batch.day - self.trained_until_day).float()

    def _kd_target(self, batch: Batch) -> tuple[Tensor, Tensor] | None:
        """Teacher (or adapter) logits as KD targets, and which rows have them."""
        if self.teacher is None or (self.kd.weight == 0 and self.adapter is None):
            return None
        t_logits, found = self.teacher(batch)
        t_logits = t_logits.to(self.device, torch.float32)
        found = found.to(self.device)
        if self.adapter is None:
            return t_logits, found
        opt = self.optimizers()[1]
        stale = self._staleness(batch)
        z = self.adapter(t_logits, batch.domain, stale)
        a_loss = masked_mean(F.binary_cross_entropy_with_logits(z, batch.labels,
                                                                reduction="none"), found)
        # the adapter is a tiny fp32 MLP: plain autograd and its raw optimizer, as Lightning's
        # per-step wrappers (closure, hooks, precision plugin) cost more than the adapter itself
        raw = getattr(opt, "optimizer", opt)
        raw.zero_grad(set_to_none=True)
        a_loss.backward()
        raw.step()
        self._log_step("train/adapter_loss", a_loss, len(batch))
        with torch.no_grad():
            return self.adapter(t_logits, batch.domain, stale), found

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        self._batch_idx = batch_idx
        target = self._kd_target(batch)
        out = self.student_output(batch)
        label_loss, _ = self.loss(out.logits, batch.labels, self.label_mask(batch))
        loss = self.kd.label_weight * label_loss
        if target is not None and self.kd.weight > 0:
            t_logits, found = target
            kd_fn = KD_LOSSES[self.kd.loss]
            if self.aux_head is not None or out.distill_logits is not None:
                head = out.distill_logits
                if head is None:
                    if out.embedding is None:
                        raise ValueError("the auxiliary head needs StudentOutput.embedding")
                    head = self.aux_head(out.embedding)
                kd = self.kd.aux_weight * masked_mean(kd_fn(head, t_logits,
                                                            temperature=self.kd.temperature),
                                                      found)
            else:
                kd = masked_mean(kd_fn(out.logits, t_logits, temperature=self.kd.temperature),
                                 found)
            loss = loss + self.kd.weight * kd
            self._log_step("train/kd_loss", kd, len(batch))
        opt = self.optimizers()
        opt = opt[0] if isinstance(opt, list) else opt
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self._log_step("train/loss", loss, len(batch), prog_bar=True)
        return loss

    def _log_step(self, name: str, value: Tensor, n: int, prog_bar: bool = False) -> None:
        """Log on the trainer's ``log_every_n_steps`` steps only: one ``self.log`` costs
        ~1.5 ms in Lightning, a quarter of a small student's step."""
        every = self.trainer.log_every_n_steps if self._trainer is not None else 1
        if getattr(self, "_batch_idx", 0) % max(every, 1) == 0:
            self.log(name, value.detach(), prog_bar=prog_bar, batch_size=n)

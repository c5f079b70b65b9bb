"""Lightning module that trains a student with any list of transfer methods (DESIGN §5.1).

One step, in order: each method's ``before_student`` (the Student Adapter updates itself on the
batch's fresh labels and realigns the KD target); the student's forward, with the
representation features the methods feed; each method's ``after_forward`` (an auxiliary head
computes its logits); the student's loss ``label_weight · BCE(serving, y)`` plus every method's
loss terms; one optimiser step over the student and the methods' parameter groups (the
gradient norm clipped to ``grad_clip`` first, when given). The module knows no method by name.

The backward and optimiser step skip Lightning's wrappers where they are inert
(:mod:`gemkd.transfer.distill.manual_step`, measured there).

Students stream once through time-ordered days. Evaluation is inherited from ``RankingModule``:
only the serving head is measured.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.distill.manual_step import ManualStep
from gemkd.transfer.methods.base import NEEDS, StepState, TeacherFn, TransferMethod
from gemkd.transfer.models import StudentOutput, as_student_output, start_output_bias
from gemkd.transfer.training.ranking_module import RankingModule


class DistillModule(RankingModule):
    """``student`` follows the student contract of :mod:`gemkd.transfer.models` (a model returning a
    ``TeacherOutput`` is trained as one: a domain FM); ``methods`` are set-up
    :class:`TransferMethod`\\ s; ``teacher`` answers batches for the methods that need it;
    ``trained_until_day`` gives the staleness ``batch.day - trained_until_day`` a method may read;
    ``grad_clip`` clips the gradient norm of the student's optimiser before its step (manual
    optimisation: the ``Trainer``'s own ``gradient_clip_val`` must stay unset)."""

    hparams_ignore = ("model", "student", "teacher", "methods")

    def __init__(self, student: nn.Module, tasks: list[str], domains: list[str], *,
                 methods: Sequence[TransferMethod] = (), teacher: TeacherFn | None = None,
                 trained_until_day: int | None = None, grad_clip: float | None = None,
                 **ranking_args: Any) -> None:
        super().__init__(student, tasks, domains, **ranking_args)
        for m in methods:
            if not isinstance(m, TransferMethod):
                raise TypeError(f"{type(m).__name__} is not a TransferMethod")
            unknown = sorted(set(m.needs) - set(NEEDS))
            if unknown:
                raise ValueError(f"method {m.name} needs unknown input {unknown[0]!r}; "
                                 f"inputs are {', '.join(NEEDS)}")
            if "teacher" in m.needs and teacher is None:
                raise ValueError(f"method {m.name} needs a teacher, and this run has none")
        self.methods = nn.ModuleList(methods)
        logit = self.base_rate_logits() if self.start_at_base_rate else None
        for m in methods:  # a method's own output heads start calibrated too (the aux head)
            start_output_bias(m, logit)
        self.teacher = teacher
        self.trained_until_day = trained_until_day
        self.grad_clip = grad_clip
        self.automatic_optimization = False
        self._manual_step = ManualStep()

    @property
    def transfer_methods(self) -> Sequence[TransferMethod]:
        """``methods`` as what they are (``__init__`` checked each; an ``nn.ModuleList`` is typed
        to hold any ``Module``)."""
        return cast(Sequence[TransferMethod], self.methods)

    # ------------------------------------------------------------------ forward
    def features(self, batch: Batch) -> Tensor | None:
        """The representation features the methods feed (concatenated), on the batch's device."""
        parts = [f for m in self.transfer_methods if (f := m.features(batch)) is not None]
        if not parts:
            return None
        feats = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return feats.to(batch.labels.device, non_blocking=True)  # code lookups answer on host

    def student_output(self, batch: Batch) -> StudentOutput:
        feats = self.features(batch)
        out = self.model(batch, feats) if feats is not None else self.model(batch)
        try:
            return as_student_output(out)
        except TypeError:
            raise TypeError(f"{type(self.model).__name__}.forward must return a StudentOutput, "
                            f"got {type(out).__name__}") from None

    def serving_logits(self, batch: Batch) -> Tensor:
        return self.student_output(batch).logits

    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> dict:
        return {"example_id": batch.example_id, "logits": self.serving_logits(batch).detach()}

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        student = self.student_optimizer()
        # a method's group with the settings of one of the student's (the auxiliary head's and
        # the fused adapter's, at the student's lr without decay, in the quickstart) joins it:
        # each parameter takes the same update, and each group costs the step its own pass
        student.merge_equal_groups = True
        own: list[torch.optim.Optimizer] = []
        for m in self.transfer_methods:
            for group in m.param_groups(self.lr):
                student.add_param_group(group)
            own += m.configure_optimizers()
        return [student, *own]

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        n = len(batch)
        step = StepState(batch, self.teacher, self.device,
                         log=lambda name, value: self._log_step(name, value, n, batch_idx),
                         trained_until_day=self.trained_until_day)
        loss = self.training_loss(step)
        opt = self.optimizers()
        opt = opt[0] if isinstance(opt, list) else opt
        self._manual_step(self, opt, loss, self.grad_clip)  # zero_grad, backward, clip, step
        self._log_step("train/loss", loss, n, batch_idx, prog_bar=True)
        return loss

    # see RankingModule's
    training_step.__signature__ = inspect.signature(training_step)  # type: ignore[attr-defined]

    def training_loss(self, step: StepState, out: StudentOutput | None = None) -> Tensor:
        """The step's loss: the methods' hooks, the student's forward, its label loss and the
        methods' terms (a pack, :mod:`gemkd.transfer.packs.pack`, runs this per member, with
        the student's ``out`` computed already when its members are stacked). A knob may be a
        tensor there (one value per member): the shortcuts for a weight of 1 apply to Python
        numbers only."""
        batch = step.batch
        for m in self.transfer_methods:
            m.before_student(step)
        if out is None:
            out = self.student_output(batch)
        if out.distill_logits is not None:  # the student's own distillation head
            step.distill_logits = out.distill_logits
        for m in self.transfer_methods:
            m.after_forward(step, out)
        label_loss, _ = self.loss(out.logits, batch.labels, self.label_mask(batch))
        if step.members is not None:  # a stacked pack: each member's, [K, 1, 1]
            label_loss = label_loss.view(-1, 1, 1)
        # 1.0 · x is x, bit for bit (and its gradient too): skip the op and its backward
        weight = step.label_weight
        unit = not isinstance(weight, Tensor) and weight == 1.0
        # a tensor weight (a pack's knob, float64) in the loss's dtype, as a Python float is
        loss = label_loss if unit else (weight.to(label_loss.dtype) if isinstance(weight, Tensor)
                                        else weight) * label_loss
        for m in self.transfer_methods:
            for term in m.loss(step, out).values():
                loss = loss + term
        return loss

    def _log_step(self, name: str, value: Tensor, n: int, batch_idx: int,
                  prog_bar: bool = False) -> None:
        """Log on the steps the trainer's loggers write (batch ``k`` with ``(k + 1) %
        log_every_n_steps == 0``) only: one ``self.log`` costs ~1.5 ms in Lightning, a quarter
        of a small student's step, and a value logged on another step never reaches a logger."""
        # (Lightning's logger connector sets log_every_n_steps; Trainer does not declare it)
        every = (self.trainer.log_every_n_steps  # type: ignore[attr-defined]
                 if self._trainer is not None else 1)
        if (batch_idx + 1) % max(every, 1) == 0:
            self.log(name, value.detach(), prog_bar=prog_bar, batch_size=n)


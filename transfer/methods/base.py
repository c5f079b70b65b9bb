"""The transfer-method protocol (DESIGN §5.1): what a method needs, builds and adds to a step.

A variant of an experiment is a list of methods (``full: [kd, aux_head, repr]``);
:class:`~gemkd.transfer.distill.DistillModule` runs a student's step and lets each method
contribute, knowing none of them by name. A method is an ``nn.Module`` (its parts are submodules, so
they move with the student, are checkpointed and averaged) and overrides only the hooks it uses:

============================  ===========================================================
hook                          what it is for
============================  ===========================================================
``needs`` / ``provides``      inputs it needs from the experiment (``teacher``: logits,
                              ``teacher_emb``: the stored representation, ``codes``: LoopFM
                              codes, ``teacher_weights``: the teacher checkpoint, ``pairs``:
                              SOLARIS pair vectors) and capabilities it offers other methods
                              (``kd_loss``)
``requires``                  capabilities another method of the variant must provide
``tunable``                   its knobs (``__init__`` argument names) → their ranges
                              (:mod:`gemkd.transfer.methods.space`; a list is a choice)
``spec_defaults``             ``__init__`` arguments the experiment spec supplies unless the
                              variant sets them: argument → spec key (KD: ``loss`` →
                              ``kd_loss``)
``feature_dim(ctx)``          width of the representation features it feeds the student
``setup(ctx)``                build its parts once the student exists
``init_output_bias(logit)``   optional (:class:`gemkd.transfer.models.OptionalHooks`): start a head
                              of its own at the base rates' logits ``[n_tasks]`` (after
                              ``setup``, once)
``param_groups(lr)``          parameters trained with the student's optimiser
``configure_optimizers()``    optimisers of its own (stepped by the method itself)
``features(batch)``           representation features ``[B, F]`` for the student
``before_student(step)``      an update before the student's (the Student Adapter)
``after_forward(step, out)``  read the student's output (an auxiliary head's logits)
``loss(step, out)``           named loss terms added to the student's loss
============================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.methods.space import Range
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.plugins import Registry
from gemkd.transfer.repr_features.asof import AsOfCodes
from gemkd.transfer.solaris.pair_store import PairStore

NEEDS = ("teacher", "teacher_emb", "codes", "teacher_weights", "pairs")
#: The built-in transfer methods' names, each registered beside its class
#: (``@BUILTIN_METHODS.register``): ``kd`` in :mod:`gemkd.transfer.methods.kd`, the others in
#: ``gemkd.adapters.methods``, whose import fills the table.
BUILTIN_METHODS = Registry("method")


@dataclass
class TeacherTargets:
    """A teacher's answer for one batch, on the step's device: ``logits [B, T]`` float32 in the
    student's task order, ``found [B]`` (rows without a teacher row get no teacher loss) and the
    stored representation ``emb [B, E]`` when a method needs it."""

    logits: Tensor
    found: Tensor
    emb: Tensor | None = None


TeacherFn = Callable[[Batch], TeacherTargets]


@dataclass
class MethodContext:
    """What the experiment hands a method at set-up. ``teacher`` answers batches (None for a
    labels-only variant; in a run a ``StoreTeacher``, which also has ``emb_dim``); ``codes`` is
    the LoopFM codes, a :class:`gemkd.transfer.repr_features.AsOfCodes` (``code_dim``,
    ``lookup(user_id, ts)`` on the host), built only when a method of the spec needs ``codes``
    and None otherwise; ``pairs`` the SOLARIS pair store's lookup source, a
    :class:`gemkd.transfer.solaris.PairStore` (None unless a method needs ``pairs``);
    ``teacher_weights()`` loads the teacher checkpoint's
    state dict (None where the teacher is an imported store); ``sample_batch()`` reads a few
    training rows (to probe the student's shapes). ``student`` and ``teacher`` are None in
    ``feature_dim``. Every field: docs/guides/custom_method.md."""

    schema: DatasetSchema
    tasks: list[str]
    domains: list[str]
    lr: float
    student: nn.Module | None = None
    teacher: TeacherFn | None = None
    codes: AsOfCodes | None = None
    pairs: PairStore | None = None
    trained_until_day: int | None = None
    teacher_weights: Callable[[], dict[str, Tensor]] | None = None
    sample_batch: Callable[[], Batch] | None = None

    def embedding_width(self) -> int:
        """The width of the student's ``StudentOutput.embedding``, read off one forward."""
        if self.student is None or self.sample_batch is None:
            raise RuntimeError("embedding_width needs the student and sample_batch")
        with torch.no_grad():
            out = self.student(self.sample_batch())
        if out.embedding is None:
            raise ValueError(f"{type(self.student).__name__} returns no embedding: the "
                             "auxiliary head needs StudentOutput.embedding")
        return int(out.embedding.shape[-1])


class StepState:
    """One training step as the methods see it. The teacher is looked up on first use; a
    method may replace the KD target (``kd_logits``, the adapter does), name the logits a
    distillation loss applies to (``distill_logits`` with ``distill_weight``, the auxiliary head
    does) or scale the serving head's label loss (``label_weight``: multiply it, so that
    two methods' scales compose, KD's 1 − α and the auxiliary head's). ``staleness`` (days since
    the teacher's training ended, ``[B]`` float) is given, or computed on first use from
    ``trained_until_day``: most variants never read it, and two eager ops a step add up.

    ``members``: K when a pack runs its members' step at once (``stacks`` methods, below): the
    student's output is ``[K, B, ...]``, a per-member knob a ``[K, 1, 1]`` float64 tensor, and
    every per-member loss ``[K, 1, 1]``; None in a run's own step."""

    def __init__(self, batch: Batch, teacher: TeacherFn | None, device: torch.device,
                 staleness: Tensor | None = None,
                 log: Callable[[str, Tensor], None] | None = None, *,
                 trained_until_day: int | None = None,
                 targets: TeacherTargets | None = None, members: int | None = None) -> None:
        self.batch, self.device, self._staleness = batch, device, staleness
        self.members = members
        self._trained_until_day = trained_until_day
        # targets: the teacher's answer, looked up already (a pack asks once for its members)
        self._teacher_fn, self._teacher = teacher, targets
        self._log = log
        self.kd_logits: Tensor | None = None
        self.distill_logits: Tensor | None = None
        # a tensor (one value per member) in a batched pack
        self.distill_weight: float | Tensor = 1.0
        self.label_weight: float | Tensor = 1.0

    @property
    def staleness(self) -> Tensor | None:
        if self._staleness is None and self._trained_until_day is not None:
            self._staleness = (self.batch.day - self._trained_until_day).float()
        return self._staleness

    @property
    def teacher(self) -> TeacherTargets:
        if self._teacher is None:
            if self._teacher_fn is None:
                raise RuntimeError("this variant has no teacher, but a method asked for one")
            t = self._teacher_fn(self.batch)
            self._teacher = TeacherTargets(
                t.logits.to(self.device, torch.float32), t.found.to(self.device),
                None if t.emb is None else t.emb.to(self.device, torch.float32))
        return self._teacher

    def kd_target(self) -> tuple[Tensor, Tensor]:
        """``(target logits, found)``: the teacher's logits unless a method realigned them."""
        t = self.teacher
        return (t.logits if self.kd_logits is None else self.kd_logits), t.found

    def log(self, name: str, value: Tensor) -> None:
        if self._log is not None:
            self._log(name, value)


class TransferMethod(nn.Module):
    """Base class of every transfer method; see the module docstring for the hooks."""

    needs: ClassVar[frozenset[str]] = frozenset()
    provides: ClassVar[frozenset[str]] = frozenset()
    requires: ClassVar[frozenset[str]] = frozenset()
    tunable: ClassVar[dict[str, Range | list[Any]]] = {}
    spec_defaults: ClassVar[dict[str, str]] = {}
    #: Declared ``True`` by a class whose ``before_student`` / ``after_forward`` / ``loss``
    #: also take a pack's stacked step (``StepState.members``; its submodules' parameters
    #: ``[K, ...]``): a pack then runs them once for all members instead of under vmap. Only
    #: the class that declares it counts (a subclass that overrides a hook must declare it
    #: again); hooks left at these defaults stack anyway.
    stacks: ClassVar[bool] = False
    #: the name the run's spec gave the method (a built-in name or its class_path), if any
    registered_name: str | None = None

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    def feature_dim(self, ctx: MethodContext) -> int:
        return 0

    def setup(self, ctx: MethodContext) -> None:
        return None

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Default: every trainable parameter of the method, at the student's ``lr``, no weight
        decay, in one group named after the method."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [{"name": self.name, "params": params, "lr": lr, "weight_decay": 0.0}] \
            if params else []

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return []

    def features(self, batch: Batch) -> Tensor | None:
        return None

    def before_student(self, step: StepState) -> None:
        return None

    def after_forward(self, step: StepState, out: StudentOutput) -> None:
        return None

    def loss(self, step: StepState, out: StudentOutput) -> dict[str, Tensor]:
        return {}

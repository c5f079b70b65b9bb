"""The two model contracts (DESIGN §5.1): what a teacher and a student return.

* A **teacher** is any ``nn.Module`` whose ``forward(batch)`` returns a :class:`TeacherOutput`
  (logits per task, named representations) and whose ``representation_dims()`` names the
  representations an export may store. GEM, the domain FMs, the MLP ranker and a user's own
  model satisfy it; a store written by a model outside gemkd stands in for one
  (``gemkd store import``).
* A **student** is any ``nn.Module`` whose ``forward(batch, features=None)`` returns a
  :class:`StudentOutput`. ``features`` is ``None`` or the representation features ``[B, F]``
  that a transfer method feeds (LoopFM codes pooled per example). Transfer methods never look
  inside a student: they use the serving logits, the optional distillation-head logits, and the
  optional embedding (the input of an auxiliary head).

Both outputs are registered pytree nodes, so FSDP2's hooks and ``torch.compile`` see their
tensors. They live in ``transfer`` so pipelines can use them without importing the model
packages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from torch.utils import _pytree

from transfer.data.batch import Batch


@dataclass
class TeacherOutput:
    """``logits [B, T]`` float32, one column per task of the dataset (schema order);
    ``repr`` named representations ``{name: [B, dim]}`` (e.g. ``trunk``, ``wukong.0``)."""

    logits: torch.Tensor
    repr: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class StudentOutput:
    """``logits [B, T]`` serving head (the only one evaluated and served);
    ``distill_logits [B, T]`` a student's own distillation head, if it has one;
    ``embedding [B, E]`` the shared trunk's output, input to an auxiliary distillation head."""

    logits: torch.Tensor
    distill_logits: torch.Tensor | None = None
    embedding: torch.Tensor | None = None


_pytree.register_dataclass(TeacherOutput)
_pytree.register_dataclass(StudentOutput)


@runtime_checkable
class Teacher(Protocol):
    """``forward(batch) -> TeacherOutput`` and ``representation_dims() -> {name: dim}``.

    Optional members, looked up by name (``hasattr``/``getattr``), so they are not declared
    here: ``isinstance`` would then reject the models that lack them (docs/custom_teacher.md):

    * ``from_config(schema, model)`` (classmethod): builds the model instead of
      ``cls(schema, **model)``;
    * ``init_output_bias(logit [n_tasks])``: starts the output heads at the training base
      rates' logits, once, when the fit's module is built;
    * ``fsdp_units() -> list[nn.Module]`` or ``fsdp_wrap_modules() -> tuple[type | nn.Module,
      ...]``: the FSDP2 units under ``strategy: fsdp`` (without them the model is one unit).
    """

    def __call__(self, batch: Batch) -> TeacherOutput: ...

    def representation_dims(self) -> dict[str, int]: ...


@runtime_checkable
class Student(Protocol):
    """``forward(batch, features=None) -> StudentOutput``, built as ``cls(schema, tasks,
    **init_args)``.

    Optional members, looked up by name and so not declared here (``isinstance`` would then
    reject the students that lack them; docs/custom_student.md):

    * ``init_output_bias(logit [n_tasks])``: starts the serving head at the training base
      rates' logits, once, when the training module is built;
    * ``embedding_tables() -> {name: nn.Embedding}``: the tables ``param_share`` copies the
      teacher's into (without it that method refuses the student);
    * ``fsdp_units()`` / ``fsdp_wrap_modules()``: as for a teacher, read only under FSDP2.
    """

    def __call__(self, batch: Batch, features: torch.Tensor | None = None) -> StudentOutput: ...


def as_student_output(out: StudentOutput | TeacherOutput, embedding: str = "trunk"
                      ) -> StudentOutput:
    """A teacher trained like a student (a domain FM distilling from GEM): its logits serve and
    its ``embedding`` representation feeds an auxiliary head."""
    if isinstance(out, StudentOutput):
        return out
    if isinstance(out, TeacherOutput):
        return StudentOutput(logits=out.logits, embedding=out.repr.get(embedding))
    raise TypeError(f"a model trained by DistillModule must return StudentOutput or "
                    f"TeacherOutput, got {type(out).__name__}")

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

Beyond ``forward`` (and a teacher's ``representation_dims``) every member is optional: the
:class:`OptionalHooks` protocol declares them with their defaults, and :func:`optional_hook` is
the one place gemkd looks them up.

Both outputs are registered pytree nodes, so FSDP2's hooks and ``torch.compile`` see their
tensors. They live in ``transfer`` so pipelines can use them without importing the model
packages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils import _pytree


@dataclass
class TeacherOutput:
    """What a teacher's forward returns.

    Attributes
    ----------
    logits
        ``[B, T]`` float32, one column per task of the dataset (schema order).
    repr
        Named representations ``{name: [B, dim]}`` (e.g. ``trunk``, ``wukong.0``).
    """

    logits: torch.Tensor
    repr: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class StudentOutput:
    """What a student's forward returns.

    Attributes
    ----------
    logits
        ``[B, T]``: the serving head, the only one evaluated and served.
    distill_logits
        ``[B, T]``: a student's own distillation head, if it has one.
    embedding
        ``[B, E]``: the shared trunk's output, the input of an auxiliary distillation head.
    """

    logits: torch.Tensor
    distill_logits: torch.Tensor | None = None
    embedding: torch.Tensor | None = None


_pytree.register_dataclass(TeacherOutput)
_pytree.register_dataclass(StudentOutput)


class OptionalHooks(Protocol):
    """The optional members of a teacher, a student or a transfer method
    (docs/guides/custom_teacher.md, custom_student.md, custom_method.md). gemkd calls each
    through :func:`optional_hook`, the one place they are looked up; an object without one gets
    the default named here. They are not part of a ``runtime_checkable`` protocol on purpose: a
    model lacking them is still a model.
    """

    @classmethod
    def from_config(cls, schema: Any, model: Mapping[str, Any]) -> nn.Module:
        """A teacher class's builder from its config's ``model:`` mapping. Default: gemkd checks
        the keys and simple annotations against ``cls(schema, **model)`` and calls it."""
        raise NotImplementedError

    def init_output_bias(self, logit: torch.Tensor) -> None:
        """Start the output head(s) at ``logit [n_tasks]``, the logits of the training base
        rates; called once when the training module is built (a teacher's, a student's, a
        method's own head). Default: the heads start where their initialisation put them."""

    def fsdp_units(self) -> list[nn.Module]:
        """The module instances ``strategy: fsdp`` shards one by one (deepest first, then the
        whole model); wins over :meth:`fsdp_wrap_modules`. Default: the model is one unit."""
        return []

    def fsdp_wrap_modules(self) -> tuple[type[nn.Module] | nn.Module, ...]:
        """Classes (every submodule of one is a unit) and instances to shard, when there is no
        :meth:`fsdp_units`. Default: none."""
        return ()

    def embedding_tables(self) -> dict[str, nn.Embedding]:
        """A student's tables by feature or event-field name (a shared table under its
        feature's name): what ``param_share`` copies a teacher's tables into. Default: none,
        and ``param_share`` refuses the student."""
        return {}


#: The names :func:`optional_hook` looks up
HOOKS = frozenset(name for name in vars(OptionalHooks) if not name.startswith("_"))


def optional_hook(obj: object, name: str) -> Callable[..., Any] | None:
    """``obj``'s optional hook ``name`` (a member of :class:`OptionalHooks`; bound to ``obj``, a
    model, a method or a class), or None when ``obj`` does not define it."""
    if name not in HOOKS:
        raise ValueError(f"{name!r} is not an optional hook (hooks: {', '.join(sorted(HOOKS))})")
    hook = getattr(obj, name, None)
    return hook if callable(hook) else None


def start_output_bias(obj: object, logit: torch.Tensor | None) -> None:
    """``obj.init_output_bias(logit)`` when ``obj`` has the hook and ``logit`` is known."""
    hook = optional_hook(obj, "init_output_bias")
    if hook is not None and logit is not None:
        hook(logit)


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The FSDP units ``model`` declares (:meth:`OptionalHooks.fsdp_units`, else the classes and
    instances of :meth:`OptionalHooks.fsdp_wrap_modules`), each once, without ``model`` itself,
    deepest first (children before parents); none: the model is one unit."""
    units_hook = optional_hook(model, "fsdp_units")
    wrap_hook = optional_hook(model, "fsdp_wrap_modules")
    if units_hook is not None:
        units = list(units_hook())
    elif wrap_hook is not None:
        spec = tuple(wrap_hook())
        classes = tuple(s for s in spec if isinstance(s, type))
        instances = [s for s in spec if isinstance(s, nn.Module)]
        units = instances + ([m for m in model.modules() if isinstance(m, classes)]
                             if classes else [])
    else:
        units = []
    order = {id(m): i for i, m in enumerate(model.modules())}
    seen: set[int] = set()
    unique = []
    for m in units:
        if id(m) not in seen and m is not model:
            seen.add(id(m))
            unique.append(m)
    return sorted(unique, key=lambda m: order.get(id(m), -1), reverse=True)


def embedding_tables(model: nn.Module) -> dict[str, nn.Embedding] | None:
    """``model.embedding_tables()`` (name → table), or None when the model has no such hook."""
    hook = optional_hook(model, "embedding_tables")
    return None if hook is None else dict(hook())


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

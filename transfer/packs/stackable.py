"""Whether a pack's step can run stacked, once for every member without vmap: the student's
own ``forward_stacked`` (:func:`stacked_forward`) and methods whose step hooks take stacked
tensors (:func:`method_stacks`); otherwise :class:`~gemkd.transfer.packs.pack.PackedDistill`
runs that part under ``torch.func.vmap``."""

from __future__ import annotations

from typing import Any

from torch import nn

from gemkd.transfer.methods.base import TransferMethod
from gemkd.transfer.models import optional_hook


def stacked_forward(student: nn.Module) -> Any:
    """``student.forward_stacked`` when it mirrors the student's ``forward``, else None: the
    class that defines ``forward_stacked`` must define ``forward`` too, and a subclass of it
    may change ``__init__`` only (a user's subclass that overrides ``forward`` or a building
    block it calls runs under vmap, not through a stacked forward that would ignore it)."""
    hook = optional_hook(student, "forward_stacked")
    if hook is None:
        return None
    mro = type(student).__mro__
    owner = next(c for c in mro if "forward_stacked" in vars(c))
    if "forward" not in vars(owner):
        return None
    for cls in mro[:mro.index(owner)]:
        if any(callable(v) and name != "__init__" for name, v in vars(cls).items()):
            return None
    return hook


#: The hooks of a step a stacked pack runs once for every member (``TransferMethod.stacks``)
_STEP_HOOKS = ("before_student", "after_forward", "loss")


def method_stacks(method: TransferMethod) -> bool:
    """Whether ``method``'s step hooks take a stacked pack's step: each is the protocol's
    default or defined by a class that declares ``stacks = True``, and no subclass below such
    a class overrides anything but ``__init__``."""
    mro = type(method).__mro__
    owners = {next(c for c in mro if hook in vars(c)) for hook in _STEP_HOOKS}
    declared = [c for c in owners if c is not TransferMethod]
    if any(vars(c).get("stacks") is not True for c in declared):
        return False
    if not declared:
        return True
    lowest = min(mro.index(c) for c in declared)
    return not any(callable(v) and name != "__init__"
                   for cls in mro[:lowest] for name, v in vars(cls).items())

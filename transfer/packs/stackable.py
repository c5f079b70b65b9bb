"""Whether a pack's step can run stacked, once for every member without vmap: a stacked forward
registered for the student's class (:func:`stacked_forward`, from
:mod:`~gemkd.transfer.packs.stacked_students`) and methods whose step hooks take stacked
tensors (:func:`method_stacks`); otherwise :class:`~gemkd.transfer.packs.pack.PackedDistill`
runs that part under ``torch.func.vmap``."""

from __future__ import annotations

from gemkd.transfer.methods.base import TransferMethod
from gemkd.transfer.packs.stacked_students import stacked_forward

__all__ = ["method_stacks", "stacked_forward"]


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

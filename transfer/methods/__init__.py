"""Transfer methods as plug-ins (DESIGN §5.1): the protocol, and plain KD (the core method).

The other built-ins build modules of ``adapters`` and live there (``gemkd.adapters.methods``); a
user's own method is a :class:`TransferMethod` subclass in the user's package, named by its
import path in a spec. A method's knobs are declared as ranges
(:mod:`gemkd.transfer.methods.space`).
"""

from gemkd.transfer.methods.base import (
    NEEDS,
    MethodContext,
    StepState,
    TeacherFn,
    TeacherTargets,
    TransferMethod,
)
from gemkd.transfer.methods.kd import KD
from gemkd.transfer.methods.space import Categorical, IntRange, LogUniform, Range, Uniform

__all__ = ["KD", "NEEDS", "Categorical", "IntRange", "LogUniform", "MethodContext", "Range",
           "StepState", "TeacherFn", "TeacherTargets", "TransferMethod", "Uniform"]

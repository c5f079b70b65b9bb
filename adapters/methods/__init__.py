"""The built-in transfer methods (DESIGN §5, §5.1) and their short names.

``kd`` is the core's (:mod:`gemkd.transfer.methods`); the others build modules of this package. A
spec names a method by one of these names or by a dotted import path to a user's own
:class:`~gemkd.transfer.methods.TransferMethod` subclass.
"""

from gemkd.adapters.methods.aux_head_method import AuxHead
from gemkd.adapters.methods.param_share import ParamShare
from gemkd.adapters.methods.repr_features import Repr
from gemkd.adapters.methods.solaris import Solaris
from gemkd.adapters.methods.student_adapter_method import Adapter

BUILTIN_METHODS: dict[str, str] = {
    "kd": "gemkd.transfer.methods.kd.KD",
    "aux_head": "gemkd.adapters.methods.aux_head_method.AuxHead",
    "adapter": "gemkd.adapters.methods.student_adapter_method.Adapter",
    "repr": "gemkd.adapters.methods.repr_features.Repr",
    "param_share": "gemkd.adapters.methods.param_share.ParamShare",
    "solaris": "gemkd.adapters.methods.solaris.Solaris",
}

__all__ = ["BUILTIN_METHODS", "Adapter", "AuxHead", "ParamShare", "Repr", "Solaris"]

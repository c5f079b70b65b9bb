"""The built-in transfer methods (DESIGN §5, §5.1) and their short names.

``kd`` is the core's (:mod:`transfer.methods`); the others build modules of this package. A spec
names a method by one of these names or by a dotted import path to a user's own
:class:`~transfer.methods.TransferMethod` subclass.
"""

from adapters.methods.aux_head import AuxHead
from adapters.methods.param_share import ParamShare
from adapters.methods.repr_features import Repr
from adapters.methods.student_adapter import Adapter

BUILTIN_METHODS: dict[str, str] = {
    "kd": "transfer.methods.kd.KD",
    "aux_head": "adapters.methods.aux_head.AuxHead",
    "adapter": "adapters.methods.student_adapter.Adapter",
    "repr": "adapters.methods.repr_features.Repr",
    "param_share": "adapters.methods.param_share.ParamShare",
}

__all__ = ["BUILTIN_METHODS", "Adapter", "AuxHead", "ParamShare", "Repr"]

"""The built-in transfer methods (DESIGN §5, §5.1) and their short names.

Each registers its name beside its class in :data:`BUILTIN_METHODS`
(:mod:`gemkd.transfer.methods.base`, where ``kd``, the core's, registers too); importing this
package fills the table. A spec names a method by one of these names or by a dotted import path to
a user's own :class:`~gemkd.transfer.methods.TransferMethod` subclass.
"""

from gemkd.adapters.methods.aux_head_method import AuxHead
from gemkd.adapters.methods.param_share import ParamShare
from gemkd.adapters.methods.repr_features import Repr
from gemkd.adapters.methods.solaris import Solaris
from gemkd.adapters.methods.student_adapter_method import Adapter
from gemkd.transfer.methods.base import BUILTIN_METHODS

__all__ = ["BUILTIN_METHODS", "Adapter", "AuxHead", "ParamShare", "Repr", "Solaris"]

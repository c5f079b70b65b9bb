"""Vertical models (students) and the registry that builds them from a config (DESIGN §1, §5).

A student is any ``torch.nn.Module`` whose ``forward(batch, features=None)`` returns a
``StudentOutput``; the built-ins share :class:`StudentBase`, a user's own need not. A pack of a
student's runs vmaps that one forward; the built-ins' packs run the stacked forwards registered
here instead (:mod:`gemkd.transfer.packs.stacked_students`: faster for a run alone).
"""

# the import order is the order of the built-in names (mlp, the default, first)
# isort: off
from gemkd.students.mlp_student import MLPStudent
from gemkd.students.dcn import DCNStudent
from gemkd.students.seq_pool import SeqPoolStudent
# isort: on
from gemkd.students.student_base import StudentBase
from gemkd.students.student_registry import BUILTIN_STUDENTS, build_student
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.packs import stacked_students

stacked_students.register_stacked(MLPStudent, stacked_students.mlp_student)
stacked_students.register_stacked(DCNStudent, stacked_students.dcn_student)
stacked_students.register_stacked(SeqPoolStudent, stacked_students.seq_pool_student)

__all__ = [
    "BUILTIN_STUDENTS",
    "DCNStudent",
    "MLPStudent",
    "SeqPoolStudent",
    "StudentBase",
    "StudentOutput",
    "build_student",
]

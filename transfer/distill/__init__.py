"""Knowledge transfer from a teacher store into students (DESIGN §5): the training module and
the store-backed teacher; the methods themselves are :mod:`transfer.methods`."""

from transfer.distill.module import DistillModule
from transfer.distill.teacher import StoreTeacher

__all__ = ["DistillModule", "StoreTeacher"]

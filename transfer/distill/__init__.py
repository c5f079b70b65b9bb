"""Knowledge transfer from a teacher store into students (DESIGN §5): the training module and
the store-backed teacher; the methods themselves are :mod:`gemkd.transfer.methods`."""

from gemkd.transfer.distill.distill_data import DistillDataModule, TeacherBatch
from gemkd.transfer.distill.module import DistillModule
from gemkd.transfer.distill.teacher_targets import StoreTeacher

__all__ = ["DistillDataModule", "DistillModule", "StoreTeacher", "TeacherBatch"]

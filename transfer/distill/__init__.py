"""Knowledge transfer from a teacher store into students (DESIGN §5)."""

from transfer.distill.losses import kd_bce, kd_mse, masked_mean
from transfer.distill.module import DistillModule, KDConfig
from transfer.distill.student import StudentOutput
from transfer.distill.teacher import StoreTeacher

__all__ = [
    "DistillModule",
    "KDConfig",
    "StoreTeacher",
    "StudentOutput",
    "kd_bce",
    "kd_mse",
    "masked_mean",
]

"""Knowledge transfer from a teacher store into students (DESIGN §5)."""

from transfer.distill.student import StudentOutput

__all__ = ["StudentOutput"]

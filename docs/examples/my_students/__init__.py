"""An example of a user's own student package (see docs/guides/custom_student.md)."""

from my_students.tower import TwoTower

__all__ = ["TwoTower"]

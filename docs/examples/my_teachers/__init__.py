"""An example package of a user's own teacher (docs/custom_teacher.md)."""

"""An example package of a user's own teacher (docs/guides/custom_teacher.md)."""

"""How much more data the teacher learnt from than the student: rows and days of each, per world
and lag, which the runner records in ``RUN_DIR/teacher_data.json`` for the report
(``RunDir.record_teacher_data``; GEM's premise is a foundation model trained on every surface
over a long history, ~100x a vertical model's rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def rows_in(data: Path, days: tuple[int, int], domains: list[str] | None = None) -> int:
    """Rows of ``data`` on the half-open ``days`` (only ``domains``' rows when given)."""
    from gemkd.transfer.data.dataset_reader import DatasetReader

    reader = DatasetReader(data, days=days, batch_size=1 << 16, categorical=[], dense=[],
                           sequence=[], oracle=False, domains=domains)
    if domains is None:  # the footers say it
        return reader.num_rows
    return sum(len(b) for b in reader)


def teacher_student_rows(data: Path, seen: tuple[int, int], protocol: str,
                         student_days: tuple[int, int], student_rows: int) -> dict[str, Any]:
    """A lag's teacher days ``seen`` and their rows (every domain) against the student's
    training rows."""
    teacher = rows_in(data, seen)
    return {"protocol": protocol, "teacher_days": list(seen),
            "teacher_rows": teacher, "student_days": list(student_days),
            "student_rows": student_rows,
            "ratio": teacher / student_rows if student_rows else None}


"""A task with no positive in the days a model learns from is refused before any training.

Why: such a task trains to a constant, its NE is NaN (the base rate is 0), and a run finds out
only when the knob search has no trial to pick from, minutes or hours in. The labels of the
days the spec reads are counted once the data is built (a few int8 columns of those days).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gemkd.experiments.run.preflight import DataMismatch, teacher_windows
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.data.schema import DatasetSchema


def check_positives(spec: RunSpec, data: str | Path, schema: DatasetSchema,
                    where: object) -> None:
    """Every task the teacher learns (all the data's tasks) has a positive in each teacher
    window, and every student task one in ``student_days`` and ``eval_days`` (on
    ``student_domain``'s rows where set); else a ``DataMismatch`` naming the window, the task
    and the rows counted."""
    from gemkd.transfer.data.dataset_writer import read_day

    checks: list[tuple[str, tuple[int, int], list[str], int | None]] = []
    if spec.teacher.store is None:
        checks += [(f"{key} (the teacher learns every task)", w, list(schema.tasks), None)
                   for key, w in teacher_windows(spec)]
    domain = (schema.domains.index(spec.student_domain)
              if spec.student_domain in schema.domains else None)
    checks += [(key, (w[0], w[1]), list(spec.student_tasks), domain)
               for key, w in (("student_days", spec.student_days),
                              ("eval_days", spec.eval_days))]
    counted: dict[int, dict[str, np.ndarray]] = {}

    def day(d: int) -> dict[str, np.ndarray]:
        if d not in counted:
            table = read_day(data, d, ["domain", *schema.tasks])
            counted[d] = {c: table.column(c).to_numpy() for c in table.column_names}
        return counted[d]

    for key, (first, end), tasks, dom in checks:
        days = [d for d in range(first, end) if d in set(schema.days)]
        for task in tasks:
            if task not in schema.tasks:
                continue  # check_data names an unknown task
            rows = positives = 0
            for d in days:
                cols = day(d)
                keep = cols["domain"] == dom if dom is not None else slice(None)
                labels = cols[task][keep]
                rows += len(labels)
                positives += int(labels.sum(dtype=np.int64))
            if positives == 0 and rows:
                on = f" of domain {spec.student_domain!r}" if dom is not None else ""
                raise DataMismatch(
                    f"{key} [{first}, {end}): task {task!r} has no positive in {where} "
                    f"({rows:,} rows{on}, every label 0): it cannot be learned or scored; "
                    "choose days with positives, drop the task, or check the mapping's label")

"""Did any model learn anything? A new user's thin log (90k rows, median user 1 rating) gave
every variant an AUC of 0.497-0.501 and the baseline an NE on ``like`` (0.9983) worse than the
constant base-rate predictor's (0.9981); the report said "teacher not resolved ... KD ΔNE
0.0000" and an MDE of 0.0001, as if the run were sensitive. When no arm — the labels-only
baseline, any variant, the teacher — beats the constant on a task, nothing was learnt there:
the first paragraph, the NE note, the sensitivity words and ``gemkd plan`` say so.

An arm beats the constant when its NE (mean over seeds) lies below the constant's
(:func:`gemkd.experiments.report.base_rate.constant_of`) by more than :data:`NE_MARGIN` *or*
its AUC lies above 0.5 by more than :data:`AUC_MARGIN`: either is something learnt (a model
can rank with miscalibrated probabilities). The constant's NE is computed exactly on the same
rows, so only the arms' seed noise matters."""

from __future__ import annotations

import math

from gemkd.experiments.report.base_rate import constant_of
from gemkd.experiments.report.summary import RunView, f4
from gemkd.experiments.results_schema import BASELINE

#: An NE this far below the constant's shows at the 4 decimals the report prints; nearer is
#: below the run's own resolution (the trial's seed std of NE was ~1e-4).
NE_MARGIN = 5e-5
#: AUC above 0.5 by more than this is ranking: 2.5 × the seeds' AUC std of the thin-log trial
#: (0.004 on 15,000 evaluation rows); nearer is what a model scoring at random shows.
AUC_MARGIN = 0.01


def arms(run: RunView, task: str) -> dict[str, tuple[float, float]]:
    """(NE, AUC) per arm of the main slice's ``task``, means over seeds: every variant, and the
    teacher (read from the baseline's row) as ``teacher``."""
    rows = run.rows(task=task)
    out: dict[str, tuple[float, float]] = {}
    for r in rows.to_dict("records"):
        out[str(r["variant"])] = (float(r.get("ne_mean", math.nan)),
                                  float(r.get("auc_mean", math.nan)))
        if r["variant"] == BASELINE:
            out["teacher"] = (float(r.get("ne_teacher_mean", math.nan)),
                              float(r.get("auc_teacher_mean", math.nan)))
    return out


def beats_constant(ne: float, auc: float, const_ne: float) -> bool:
    """Whether an arm of (NE, AUC) learnt something over the constant of NE ``const_ne``."""
    return ((math.isfinite(ne) and ne < const_ne - NE_MARGIN)
            or (math.isfinite(auc) and auc > 0.5 + AUC_MARGIN))


def no_signal_tasks(run: RunView, tasks: list[str] | None = None) -> list[str]:
    """The tasks (of ``tasks``, every task by default) where no arm beats the constant; a task
    whose constant is unknown (no per-user files) or with no arm measured is not among them."""
    out = []
    for task in tasks if tasks is not None else run.tasks:
        c = constant_of(run, task)
        a = arms(run, task)
        if c is None or not any(math.isfinite(ne) for ne, _ in a.values()):
            continue
        if not any(beats_constant(ne, auc, c.ne) for ne, auc in a.values()):
            out.append(task)
    return out


def opening_sentence(tasks: list[str]) -> str:
    """The first paragraph's sentence (empty when every task learnt something)."""
    if not tasks:
        return ""
    return (f"No model beats predicting the base rate on {_join(tasks)}: the log carries no "
            "signal these models can use at this size.")


def constant_note(run: RunView, tasks: list[str]) -> str:
    """The NE note's sentence for the tasks where nothing was learnt (NE above 1 or not)."""
    parts = []
    for task in tasks:
        c = constant_of(run, task)
        if c is None:
            continue
        parts.append(f"on {task} no arm (baseline, variants, teacher) has an NE below the "
                     f"constant's {f4(c.ne)} by more than {NE_MARGIN:g} nor an AUC above "
                     f"0.5 by more than {AUC_MARGIN:g}")
    if not parts:
        return ""
    return ("Nothing was learnt: " + "; ".join(parts) + " — every model predicts what the "
            "base rate does, and their differences are noise around it.")


def mde_caveat(tasks: list[str]) -> str:
    """What an MDE means where no model beats the constant (empty otherwise)."""
    if not tasks:
        return ""
    return (f"On {_join(tasks)} no model beats the constant base-rate predictor: the MDE is "
            "that of models sitting at the constant, whose differences are tiny because they "
            "all predict the same, and says nothing about what a method that learns would "
            "show here.")


def _join(tasks: list[str]) -> str:
    return tasks[0] if len(tasks) == 1 else ", ".join(tasks[:-1]) + " and " + tasks[-1]

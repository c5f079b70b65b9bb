"""Did any model learn anything? A new user's thin log (90k rows, median user 1 rating) gave
every variant an AUC of 0.497-0.501 and the baseline an NE on ``like`` (0.9983) worse than the
constant base-rate predictor's (0.9981); the report said "teacher not resolved ... KD ΔNE
0.0000" and an MDE of 0.0001, as if the run were sensitive. When no arm — the labels-only
baseline, any variant, the teacher — beats the constant on a task, nothing was learnt there:
the first paragraph, the NE note, the sensitivity words and ``gemkd plan`` say so.

An arm beats the constant when its NE (mean over seeds) lies below the constant's
(:func:`gemkd.experiments.report.base_rate.constant_of`) *or* its AUC lies above 0.5, each by
more than the larger of a fixed margin (:data:`NE_MARGIN`, :data:`AUC_MARGIN`) and 2 standard
errors of the arm's mean over its seeds: either is something learnt (a model can rank with
miscalibrated probabilities), and a mean nearer than its own seeds' noise is not. The
constant's NE is computed exactly on the same rows, so only the arms' noise counts."""

from __future__ import annotations

import math

from gemkd.experiments.report.base_rate import constant_of
from gemkd.experiments.report.summary import RunView, f4
from gemkd.experiments.run_dir.results_schema import BASELINE

#: An NE this far below the constant's shows at the 4 decimals the report prints; nearer is
#: below the run's own resolution (the trial's seed std of NE was ~1e-4).
NE_MARGIN = 5e-5
#: AUC above 0.5 by more than this is ranking: 2.5 × the seeds' AUC std of the thin-log trial
#: (0.004 on 15,000 evaluation rows); nearer is what a model scoring at random shows.
AUC_MARGIN = 0.01


def arms(run: RunView, task: str) -> dict[str, tuple[float, float, float, float]]:
    """(NE, AUC, NE's and AUC's standard error over seeds) per arm of the main slice's
    ``task``: every variant, and the teacher (read from the baseline's row) as ``teacher``."""
    rows = run.rows(task=task)
    out: dict[str, tuple[float, float, float, float]] = {}
    for r in rows.to_dict("records"):
        n = math.sqrt(max(float(r.get("n_seeds", 1) or 1), 1.0))
        for name, col in ((str(r["variant"]), ""), ("teacher", "_teacher")):
            if col and r["variant"] != BASELINE:
                continue
            ne_se, auc_se = (float(r.get(f"{m}{col}_std", math.nan)) / n for m in ("ne", "auc"))
            out[name] = (float(r.get(f"ne{col}_mean", math.nan)),
                         float(r.get(f"auc{col}_mean", math.nan)), ne_se, auc_se)
    return out


def beats_constant(ne: float, auc: float, const_ne: float, ne_se: float = 0.0,
                   auc_se: float = 0.0) -> bool:
    """Whether an arm of (NE, AUC), with their standard errors, learnt something over the
    constant of NE ``const_ne``."""
    ne_margin = max(NE_MARGIN, 2 * ne_se) if math.isfinite(ne_se) else NE_MARGIN
    auc_margin = max(AUC_MARGIN, 2 * auc_se) if math.isfinite(auc_se) else AUC_MARGIN
    return ((math.isfinite(ne) and ne < const_ne - ne_margin)
            or (math.isfinite(auc) and auc > 0.5 + auc_margin))


def no_signal_tasks(run: RunView, tasks: list[str] | None = None) -> list[str]:
    """The tasks (of ``tasks``, every task by default) where no arm beats the constant; a task
    whose constant is unknown (no per-user files) or with no arm measured is not among them."""
    out = []
    for task in tasks if tasks is not None else run.tasks:
        c = constant_of(run, task)
        a = arms(run, task)
        if c is None or not any(math.isfinite(v[0]) for v in a.values()):
            continue
        if not any(beats_constant(ne, auc, c.ne, ne_se, auc_se)
                   for ne, auc, ne_se, auc_se in a.values()):
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
                     f"constant's {f4(c.ne)} nor an AUC above 0.5 by more than its seeds' "
                     "noise")
    if not parts:
        return ""
    return ("Nothing was learnt: " + "; ".join(parts) + " — every model predicts what the "
            "base rate does, and their differences are noise around it.")


def meaning_paragraph(run: RunView) -> str:
    """The "What it means" paragraph where no arm beats the constant on the headline task
    (empty otherwise): there are no gains to describe, so it says so instead of reading the
    variants' differences as comparisons."""
    if not no_signal_tasks(run, [run.task]):
        return ""
    c = constant_of(run, run.task)
    assert c is not None  # no_signal_tasks leaves out a task without its constant
    return (f"Nothing was learnt on {run.task} (domain {run.domain}): no model — the "
            "labels-only baseline, any variant, the teacher — has an NE below the constant "
            f"base-rate predictor's {f4(c.ne)} or an AUC above 0.5 by more than its seeds' "
            "noise. No variant gained anything: the differences between them in the tables "
            "above are noise around the constant, so this run says nothing about whether "
            "transfer helps here.")


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

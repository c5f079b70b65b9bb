"""The constant predictor of the main slice and the base-rate shift it measures, and the
sentence that explains an NE above 1 with them.

NE divides by H(p̄) with p̄ the student's training days' positive rate (DESIGN §6), so a
constant predicting p̄ for every evaluation row scores NE 1 only when the evaluation days' rate
q equals p̄; when the rate moved, that constant scores CE(q, p̄) / H(p̄) > 1 and every model pays
for the same shift. A new user's log (74 % positive) read "on a rare task that constant is a
hard predictor to beat" under a table whose constant scored NE 1.1157, worse than every model:
the base rate had moved between the training and the evaluation days. So the sentence prints
the constant's NE, both rates, and which variants are better or worse than that constant."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gemkd.experiments.report.cluster_files import has_clusters, load_eval_sets
from gemkd.experiments.report.summary import RunView, f4
from gemkd.experiments.run_dir.results_schema import ALL
from gemkd.transfer.metrics.numerics import binary_entropy

#: A constant's NE above 1 by more than this is a shift worth naming (it shows at 4 decimals).
SHIFT_NE = 5e-4


@dataclass(frozen=True)
class ConstantArm:
    """The constant predictor on one task of the main slice, means over worlds: ``train`` the
    training days' rate p̄ (NE's), ``evaluation`` the evaluation rows' rate q, ``ne`` =
    CE(q, p̄) / H(p̄), ``calibration`` = p̄ / q."""

    train: float
    evaluation: float
    ne: float
    calibration: float

    @property
    def shifted(self) -> bool:
        return math.isfinite(self.ne) and self.ne > 1 + SHIFT_NE


def constant_of(run: RunView, task: str) -> ConstantArm | None:
    """The constant arm of ``task`` at the main domain and lag, from the per-user files (their
    positives, counts and the training rate each holds); None without them or without a
    usable rate (p̄ unknown is the evaluation rate itself: NE 1)."""
    if not has_clusters(run.run_dir):
        return None
    train, evaluation, ne, cal = [], [], [], []
    for es in load_eval_sets(run.run_dir):
        if es.lag != run.lag or task not in es.tasks:
            continue
        t = es.tasks.index(task)
        keep = (np.ones(es.sums.domain.shape, bool) if run.domain == ALL and ALL not in
                es.domains else es.sums.domain == es.groups.index(run.domain))
        n, pos = es.sums.n[keep, t].sum(), es.sums.pos[keep, t].sum()
        p, q = float(es.sums.base_rate[t]), float(pos / n) if n else math.nan
        if not math.isfinite(p):
            p = q
        if not (0 < p < 1 and math.isfinite(q) and q > 0):
            continue
        train.append(p)
        evaluation.append(q)
        ne.append((-q * math.log(p) - (1 - q) * math.log(1 - p)) / float(binary_entropy(p)))
        cal.append(p / q)
    if not ne:
        return None
    return ConstantArm(*(float(np.mean(v)) for v in (train, evaluation, ne, cal)))


def above_one_sentence(run: RunView, above: dict[str, tuple[list[str], dict[str, float]]]
                       ) -> str:
    """The note under a table with NE above 1: ``above[task]`` = (the variants above 1, every
    shown variant's NE). It compares them with the constant the teacher section prints and
    names the base-rate shift (both rates) where there is one."""
    parts = [f"{task}: " + ("every variant" if len(v) == len(ne) else ", ".join(v))
             for task, (v, ne) in above.items()]
    text = (f"NE above 1 ({'; '.join(parts)}) means worse than predicting the training days' "
            "base rate p̄ for every row, which scores NE 1 only when the evaluation days' rate "
            "equals it.")
    known = False
    for task, (_, ne) in above.items():
        c = constant_of(run, task)
        if c is None:
            continue
        known = True
        text += " " + _task_sentence(task, c, ne)
    if not known:
        text += (" A student whose calibration (Σp/Σy) is off, or whose evaluation days' rate "
                 "moved from its training days', pays for it in NE.")
    return text + " ΔNE still compares the variants on the same rows."


def _task_sentence(task: str, c: ConstantArm, ne: dict[str, float]) -> str:
    rates = (f"the positive rate is {_pct(c.train)} on the training days and "
             f"{_pct(c.evaluation)} on the evaluation days")
    worse = [v for v, x in ne.items() if math.isfinite(x) and x > c.ne]
    if c.shifted:
        head = (f"On {task} that constant scores NE {f4(c.ne)} here: {rates}, a base-rate "
                "shift that raises every model's NE as well")
    else:
        head = f"On {task} that constant scores NE {f4(c.ne)} here ({rates})"
    if not worse:
        return head + "; every variant shown is better than it."
    who = "every variant shown is" if len(worse) == len(ne) else (
        ", ".join(worse) + (" is" if len(worse) == 1 else " are"))
    return (head + f"; {who} worse than it: probabilities worse than no model's on these rows "
            "(see calibration Σp/Σy).")


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"

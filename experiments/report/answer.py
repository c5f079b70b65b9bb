"""The report's first paragraph: the answer, for every task, before any method. A new user's
report opened with ~350 words of how intervals are made; the verdicts sat in section 4, the
teacher's NE was never in the first paragraph, and the headline named the first task only (a
method hurting the second task was easy to miss).

Per task of the main slice (domain, teacher lag): the teacher against the labels-only student,
plain KD against it, and the methods' verdicts — on the primary family's task Holm's, on any
other the resolved exploratory ones. At most :data:`MAX_WORDS` words: the intervals are dropped
first, then the tasks beyond what fits are named and left to the tables."""

from __future__ import annotations

import math

import pandas as pd

from gemkd.experiments.report.family import PRIMARY
from gemkd.experiments.report.intervals import BEATS, BELOW, GAIN, LOSS, UNRESOLVED
from gemkd.experiments.report.no_signal import no_signal_tasks, opening_sentence
from gemkd.experiments.report.robustness import suffix, unresolved_fragile
from gemkd.experiments.report.summary import RunView, ci, f4, lag_str, pm
from gemkd.experiments.report.teacher_diag import (
    lower_unresolved,
    teacher_auc_better,
    teacher_better,
    teacher_row,
)
from gemkd.experiments.run_dir.results_schema import BASELINE, KD

MAX_WORDS = 120


def words(text: str) -> int:
    return len(text.split())


def answer_paragraph(run: RunView) -> str:
    """The first paragraph of report.md (and of each run on a ``--markdown`` page)."""
    lead = (f"**In short** (domain {run.domain}, teacher lag {lag_str(run.lag)} days"
            + ("; 95 % intervals, the method below" if run.has_intervals else
               "; mean ± std over seeds, no intervals: no verdicts") + "):")
    flat = no_signal_tasks(run)
    opening = " ".join(p for p in (opening_sentence(flat), _teacher_first(run, flat)) if p)
    for detail in (True, False):
        parts = [_task_clause(run, task, detail) for task in run.tasks]
        text = " ".join(p for p in (opening, lead, *parts) if p)
        if words(text) <= MAX_WORDS:
            return text
    kept: list[str] = []
    for task, part in zip(run.tasks, parts, strict=True):
        rest = [t for t in run.tasks if t != task and t not in _names(kept)]
        tail = f"Also {', '.join(rest)}: see Every task." if rest else ""
        if words(" ".join([opening, lead, *kept, part, tail])) > MAX_WORDS:
            break
        kept.append(part)
    rest = [t for t in run.tasks if t not in _names(kept)]
    tail = f"Also {', '.join(rest)}: see Every task." if rest else ""
    return " ".join(p for p in (opening, lead, *kept, tail) if p)


def _names(parts: list[str]) -> set[str]:
    return {p.split(":", 1)[0] for p in parts}


def _teacher_first(run: RunView, flat: list[str]) -> str:
    """The sentence a report must open with when its teacher is not better than the
    labels-only student (DESIGN §6: no gain is then the teacher's knowledge); none where no
    model beats the constant on its task (``flat``): the sentence before says more."""
    if teacher_better(run) is not False:
        return ""
    r = teacher_row(run)
    assert r is not None  # teacher_better found it
    if r["task"] in flat:
        return ""
    base = run.interval_rows(lag=r["teacher_lag_days"], domain=r["domain"], task=r["task"])
    base = base[base["variant"] == BASELINE]
    y = f4(base.iloc[0]["ne"]) if not base.empty else "—"
    diff = lower_unresolved(run)
    if diff is not None:  # a lower NE whose interval holds 0: not "worse probabilities"
        return ("The teacher is not resolved as better than the labels-only student on the "
                f"evaluation data: NE {f4(r['teacher_ne'])} vs the baseline's {y} ({r['task']}), "
                f"{diff}, an interval that holds 0, so a gain here is not evidence of its "
                "knowledge reaching the student (section The teacher).")
    text = ("The teacher is not better than the labels-only student on the evaluation data: NE "
            f"{f4(r['teacher_ne'])} vs the baseline's {y} ({r['task']})")
    if teacher_auc_better(run, r["task"]):
        return text + (", though its AUC is better: it ranks better with worse probabilities "
                       "(section The teacher: what it is and what to try).")
    return text + (", so a gain here is not evidence of its knowledge reaching the student "
                   "(section The teacher says what to try).")


def _task_clause(run: RunView, task: str, detail: bool) -> str:
    if run.has_intervals:
        return _interval_clause(run, task, detail)
    rows = run.rows(task=task).set_index("variant")
    if BASELINE not in rows.index:
        return f"{task}: no labels-only baseline."
    base = rows.loc[BASELINE]
    out = (f"{task}: teacher NE {f4(base['ne_teacher_mean'])} vs labels-only "
           f"{f4(base['ne_mean'])}")
    if KD in rows.index:
        kd = rows.loc[KD]
        out += (f"; KD ΔNE {pm(kd['delta_ne_mean'], kd['delta_ne_std'])}" if detail
                else f"; KD ΔNE {f4(kd['delta_ne_mean'])}")
    return out + "."


def _interval_clause(run: RunView, task: str, detail: bool) -> str:
    rows = run.interval_rows(task=task).set_index("variant")
    if rows.empty:
        return f"{task}: no results."
    any_row = rows.iloc[0]
    out = f"{task}: {_teacher_clause(any_row, rows, detail)}"
    if KD in rows.index and BASELINE in rows.index:
        kd = rows.loc[KD]
        d = (ci(kd["delta_ne"], kd["delta_ne_lo"], kd["delta_ne_hi"]) if detail
             else f4(kd["delta_ne"]))
        fragile = " (fragile)" if kd.get("gain_robustness") == "fragile" else ""
        out += f"; KD ΔNE {d}, {_word(kd['gain_verdict'])}{fragile}{_exploratory(kd)}"
    return out + f"; {_verdicts(run, task, rows)}."


def _teacher_clause(r: pd.Series, rows: pd.DataFrame, detail: bool) -> str:
    t, lo, hi = r["teacher_vs_baseline"], r["teacher_vs_baseline_lo"], r["teacher_vs_baseline_hi"]
    base = f4(rows.at[BASELINE, "ne"]) if BASELINE in rows.index else "—"
    if not math.isfinite(t):
        return "teacher unknown"
    how = ("better than" if hi < 0 else "worse than" if lo > 0 else
           "not resolved against") if math.isfinite(lo) and math.isfinite(hi) else "vs"
    shown = f" [{f4(lo)}, {f4(hi)}]" if detail and math.isfinite(lo) else ""
    return (f"teacher {how} labels only (NE {f4(r['teacher_ne'])} vs {base}, "
            f"difference {f4(t)}{shown})")


def _exploratory(r: pd.Series) -> str:
    """`` (exploratory)`` after a resolved verdict outside the primary family, as the tables
    mark it: without it the first paragraph read as a Holm-adjusted result."""
    resolved = r.get("gain_verdict") in (GAIN, LOSS)
    return " (exploratory)" if resolved and r.get("gain_family") != PRIMARY else ""


def _word(verdict: object) -> str:
    return verdict if isinstance(verdict, str) and verdict else UNRESOLVED


def _verdicts(run: RunView, task: str, rows: pd.DataFrame) -> str:
    """The methods' resolved verdicts on the task: the primary family's by Holm where this is
    its task, else the resolved ones, exploratory."""
    fam = run.family
    if fam is not None and fam.size and task == fam.task and run.domain == fam.domain \
            and run.lag == fam.lag:
        resolved = fam.resolved()
        said = "; ".join([*(_short(r["a"], r["b"], r["verdict"]) + suffix(fam, r["a"], r["b"])
                            for _, r in resolved.iterrows()),
                          *(f"{c} not resolved (fragile)" for c in unresolved_fragile(fam))])
        head = f"Holm resolves {len(resolved)} of {fam.size} primary comparisons"
        return head + (f" ({said})" if said else "")
    found = []
    for variant, r in rows.iterrows():
        if variant in (BASELINE, KD) or str(variant).rsplit("_twin", 1)[0] != variant:
            continue
        if r.get("kd_verdict") in (BEATS, BELOW) or str(r.get("kd_verdict", "")).startswith(
                ("beats ", "below ")):
            found.append(f"{variant} {r['kd_verdict']}")
        if r.get("gain_verdict") == LOSS:
            found.append(f"{variant} a real loss")
    tag = "exploratory" if run.family is not None else "no family"
    return (f"{tag}: {', '.join(found)}" if found else
            "no other method resolved against KD")


def _short(a: str, b: str, verdict: str) -> str:
    if verdict in (GAIN, LOSS):
        return f"{a} a {verdict}"
    return f"{a} {verdict}" if b == KD else f"{a} {verdict} vs {b}"

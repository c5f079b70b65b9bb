"""``## The teacher``: is the GEM teacher sound, and what to try when it is not .

A new user's run trained a teacher that memorised ids in its second epoch (validation NE 0.98
→ 1.20); the report said only that no difference "is the teacher's knowledge reaching the
student", though that teacher's AUC (0.618) beat the labels-only student's (0.574) and its
representations helped a method. So the section shows, on the evaluation days of the main slice,
the teacher's NE, AUC and calibration Σp/Σy against the labels-only student's and a constant
predictor's (the training days' base rate for every row: AUC 0.5, NE 1 when the evaluation
days' rate equals the training days'), then the teacher fit's validation curve and kept epoch
where the run's cache holds the fit (``cache/teacher-*/run``, read by
:func:`gemkd.experiments.teacher.teacher_curve.read_fit`), and words the check as exactly as
the numbers allow: a teacher worse on NE but better on AUC ranks better and predicts worse
probabilities."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from gemkd.experiments.report.base_rate import constant_of
from gemkd.experiments.report.no_signal import AUC_MARGIN, no_signal_tasks
from gemkd.experiments.report.summary import RunView, bound, ci, f4, md_table, pm, seed_stats
from gemkd.experiments.report.teacher_try import try_sentence
from gemkd.experiments.run_dir.results_schema import BASELINE
from gemkd.experiments.teacher.teacher_curve import read_fit
from gemkd.transfer.teacher_fit_dir import TeacherFitDir


@dataclass(frozen=True)
class TeacherFit:
    """One cached GEM fit: its world (the data's seed; 0 without one), days, epochs trained and
    kept, and its validation NE per epoch (``curve``: epoch → value, the first task over all
    domains; empty without validation days)."""

    world: int
    train_days: list[int]
    val_days: list[int] | None
    select: str
    epochs: int
    best_epoch: int | None
    curve: dict[int, float]
    task: str


def teacher_fits(run: RunView) -> list[TeacherFit]:
    """Every finished GEM fit in the run's cache (none for an imported store or a cache that
    was cleaned), for the main task."""
    out = []
    for step in run.run_dir.steps("teacher"):
        fit = _read_fit(step, run.task)
        if fit is not None:
            out.append(fit)
    return out


def _read_fit(step: Path, task: str) -> TeacherFit | None:
    """The fit of the cached teacher step ``step`` (None: unfinished or unreadable)."""
    try:
        fit = read_fit(TeacherFitDir(step / "run"))
        key = json.loads((step / "config.json").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    cfg, summary = fit.config, fit.summary
    data = (key.get("config") or {}).get("data") or {}
    seed = data.get("seed") if isinstance(data, dict) else None
    best = summary.get("best_epoch")  # 1-based, as teacher_fit writes it (_epoch_of)
    return TeacherFit(int(seed) if isinstance(seed, int) else 0, list(cfg.get("train_days") or []),
                      cfg.get("val_days"), str(cfg.get("select", "last")), fit.epochs,
                      int(best) if isinstance(best, int) else None, fit.ne_by_epoch(task), task)


def fits_of_lag(run: RunView) -> list[TeacherFit]:
    """The fits of the main lag: those whose training days are the lag's teacher days
    (``teacher_data.json``), else every fit (an older run without the file)."""
    fits = teacher_fits(run)
    days = {int(w): e[str(run.lag)]["teacher_days"] for w, e in run.run_dir.teacher_data().items()
            if str(run.lag) in e}
    if not days:
        return fits
    return [f for f in fits if days.get(f.world) == f.train_days] or fits


def constant_arm(run: RunView, task: str) -> tuple[float, float]:
    """(NE, calibration Σp/Σy) of predicting the training days' base rate p̄ for every
    evaluation row of the main slice, mean over worlds (:func:`constant_of`; nan without the
    per-user files)."""
    c = constant_of(run, task)
    return (c.ne, c.calibration) if c is not None else (math.nan, math.nan)


def teacher_section(run: RunView) -> list[str]:
    """The section's lines (nothing for a run whose results have no teacher NE)."""
    rows, checks = [], []
    flat = no_signal_tasks(run)
    for task in run.tasks:
        cell = run.cell(task=task)
        base = cell[cell["variant"] == BASELINE]
        if cell["ne_teacher"].isna().all() or base.empty:
            continue
        per_run = cell.drop_duplicates(["world", "seed"])
        t_ne, t_auc, t_cal = (seed_stats(per_run[c]) if c in per_run else (math.nan, math.nan)
                              for c in ("ne_teacher", "auc_teacher", "calibration_teacher"))
        b_ne, b_auc, b_cal = (seed_stats(base[c]) for c in ("ne", "auc", "calibration"))
        c_ne, c_cal = constant_arm(run, task)
        rows += [[task, "teacher (GEM)", pm(*t_ne), pm(*t_auc), pm(*t_cal)],
                 [task, "labels-only student", pm(*b_ne), pm(*b_auc), pm(*b_cal)],
                 [task, "constant (training base rate)",
                  f4(c_ne) if math.isfinite(c_ne) else "≈ 1", "0.5000", f4(c_cal)]]
        checks.append(check_sentence(task, t_ne[0], t_auc[0], t_cal[0], b_ne[0], b_auc[0],
                                     c_ne if math.isfinite(c_ne) else 1.0,
                                     ne_diff=_teacher_interval(run, task),
                                     learnt=task not in flat))
    if not rows:
        return []
    out = [f"## The teacher (domain {run.domain}, teacher lag {run.lag} days, evaluation days)",
           "", "NE, AUC and calibration Σp/Σy of the GEM teacher on the students' evaluation "
           "rows (mean ± std over worlds and seeds), against the labels-only student and a "
           "constant that predicts the training days' base rate for every row. Is the teacher "
           "sound? NE says whether its probabilities beat the student's, AUC whether its "
           "ranking does, Σp/Σy whether it is calibrated (1).", "",
           md_table(("task", "arm", "NE", "AUC", "calibration (Σp/Σy)"), rows, left=2), ""]
    out += [f"- {c}" for c in checks] + [""]
    fits = fits_of_lag(run)  # read once: the curve's lines and "What to try" both use them
    out += fit_lines(run, fits)
    if any(("worse" in c or "no better" in c) and c.split(":", 1)[0] not in flat
           for c in checks):  # where nothing was learnt, the teacher's fit is not the cause
        out += [try_sentence(run, fits), ""]
    return out


def check_sentence(task: str, ne: float, auc: float, cal: float, base_ne: float,
                   base_auc: float, const_ne: float, *,
                   ne_diff: tuple[float, float] | None = None, learnt: bool = True) -> str:
    """The teacher check of one task, saying exactly what the numbers say. ``ne_diff`` is the
    interval (lo, hi) of NE(teacher) − NE(baseline): with it the NE judgement is the first
    paragraph's (:func:`teacher_better`), not resolved
    where it holds 0; without it (no per-user files) the point estimates decide. An AUC edge is
    claimed only beyond :data:`~gemkd.experiments.report.no_signal.AUC_MARGIN`. ``learnt`` is
    False where no arm beats the constant (:mod:`gemkd.experiments.report.no_signal`): a teacher
    at the constant is then the log's lack of signal, not a fit that memorised ids."""
    if not math.isfinite(ne) or not math.isfinite(base_ne):
        return f"{task}: the teacher's or the labels-only student's NE is unknown."
    if ne_diff is not None and all(math.isfinite(x) for x in ne_diff):
        lo, hi = ne_diff
        ne_word = "better" if hi < 0 else "worse" if lo > 0 else "not resolved"
    else:
        ne_word = "better" if ne < base_ne else "worse"
    shown = f"{f4(ne)} vs {f4(base_ne)}"
    text = (f"{task}: the teacher is not resolved against the labels-only student on NE "
            f"({shown}; the difference's interval [{bound(ne_diff[0])}, {bound(ne_diff[1])}] "
            "holds 0)" if ne_diff is not None and ne_word == "not resolved" else
            f"{task}: the teacher is {ne_word} than the labels-only student on NE ({shown})")
    if math.isfinite(auc) and math.isfinite(base_auc):
        auc_word = "better" if auc > base_auc + AUC_MARGIN else "no better"
        joint = (";" if ne_word == "not resolved" else
                 " and" if (ne_word == "better") == (auc_word == "better") else " but")
        text += f"{joint} {auc_word} on AUC ({f4(auc)} vs {f4(base_auc)})"
        if ne_word == "worse" and auc_word == "better":
            text += (": it ranks better and predicts worse probabilities (calibration "
                     f"{f4(cal)}), so its ranking or representations may still help a student "
                     "while its soft targets carry its miscalibration")
    else:
        text += "; its AUC was not recorded by this run"
    if not learnt:
        text += (f"; like every arm on {task} it does not beat the constant base-rate "
                 f"predictor (NE {f4(const_ne)}): nothing was learnt on this task, so these "
                 "differences are noise and say nothing about the teacher's fit")
    elif ne > const_ne:
        text += (f"; it is also worse than the constant base-rate predictor (NE {f4(const_ne)}): "
                 "its probabilities are worse than no model's, as a teacher that memorised "
                 "its training days' ids would be")
    return text + "."


def _teacher_interval(run: RunView, task: str) -> tuple[float, float] | None:
    """The interval of NE(teacher) − NE(baseline) on the main slice's ``task`` (None without
    per-user files)."""
    if not run.has_intervals:
        return None
    rows = run.interval_rows(task=task)
    if rows.empty:
        return None
    r = rows.iloc[0]
    return float(r["teacher_vs_baseline_lo"]), float(r["teacher_vs_baseline_hi"])


def teacher_auc_better(run: RunView, task: str | None = None) -> bool | None:
    """Is the teacher's AUC above the labels-only student's by more than
    :data:`~gemkd.experiments.report.no_signal.AUC_MARGIN` on the main slice (means over worlds
    and seeds)? None when this run did not record the teacher's AUC."""
    rows = run.rows(task=task).set_index("variant")
    if BASELINE not in rows.index:
        return None
    t, b = rows.at[BASELINE, "auc_teacher_mean"], rows.at[BASELINE, "auc_mean"]
    if not (math.isfinite(t) and math.isfinite(b)):
        return None
    return bool(t > b + AUC_MARGIN)


def fit_lines(run: RunView, fits: list[TeacherFit]) -> list[str]:
    """The teacher fit's validation curve and kept epoch (per world) of ``fits``
    (:func:`fits_of_lag`), when the cache holds them."""
    if not fits:
        return ["The teacher's fit is not in this run's cache (an imported store, or a cleaned "
                "cache): no validation curve to show.", ""]
    lines = []
    for f in fits:
        days = (f"days [{f.train_days[0]}, {f.train_days[1]})" if len(f.train_days) == 2
                else "its days")
        head = f"world {f.world}: {f.epochs} epoch(s) on {days}"
        if not f.val_days:
            lines.append(f"- {head}, no validation days (`teacher_val_days: 0`): the last epoch "
                         "is kept with nothing to tell whether it overfit.")
            continue
        kept = f.best_epoch if f.select == "best" and f.best_epoch else f.epochs
        curve = ", ".join(f"{e}: {f4(v)}" for e, v in sorted(f.curve.items()))
        line = (f"- {head}, validated on [{f.val_days[0]}, {f.val_days[1]}) "
                f"(select: {f.select}); validation NE ({f.task}, every domain) by epoch: "
                f"{curve or '—'}; kept epoch {kept}")
        if f.curve:
            best = min(f.curve, key=lambda e: f.curve[e])
            if kept in f.curve and f.curve[kept] > f.curve[best] and best != kept:
                line += (f", though epoch {best} validated better ({f4(f.curve[best])}): "
                         "`select: best` would keep it")
        lines.append(line + ".")
    return ["The teacher's fit:", "", *lines, ""]


# The teacher first (DESIGN §6): a gain over the baseline under a teacher worse than the
# labels-only student is not the teacher's knowledge reaching the student, and the reader has to
# know that before any verdict. The teacher (``clusters/…/teacher__gem.npz``) is an arm on the
# same users, so NE(teacher) − NE(baseline) gets its interval from the same machinery as every
# difference (:mod:`gemkd.experiments.report.intervals`: columns ``teacher_vs_baseline*``).


def teacher_row(run: RunView) -> pd.Series | None:
    """An interval row of the family's slice (the main one without a family): every row holds
    the teacher's NE and NE(teacher) − NE(baseline); None when there is no such row."""
    fam = run.family
    where = {} if fam is None else {"lag": fam.lag, "task": fam.task, "domain": fam.domain}
    rows = run.interval_rows(**where)
    return None if rows.empty else rows.iloc[0]


def teacher_better(run: RunView) -> bool | None:
    """True when NE(teacher) − NE(baseline)'s interval lies below 0, False when it does not,
    None when it is unknown (no intervals, no teacher file, no baseline)."""
    if not run.has_intervals:
        return None
    r = teacher_row(run)
    if r is None:
        return None
    lo, hi = r["teacher_vs_baseline_lo"], r["teacher_vs_baseline_hi"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return bool(hi < 0)


def lower_unresolved(run: RunView) -> str | None:
    """``difference -0.0184 [-0.0373, 0.0006]`` when the teacher's NE is below the baseline's but
    the interval holds 0 (not better by the rule, yet not worse: words such as "worse
    probabilities" or "none of it is its knowledge" would read the point the wrong way); None
    otherwise."""
    if teacher_better(run) is not False:
        return None
    r = teacher_row(run)
    assert r is not None  # teacher_better found it
    d = r["teacher_vs_baseline"]
    if not (math.isfinite(d) and d < 0):
        return None
    return f"difference {ci(d, r['teacher_vs_baseline_lo'], r['teacher_vs_baseline_hi'])}"

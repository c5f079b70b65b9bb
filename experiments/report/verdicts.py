"""The report's text for a run with intervals (DESIGN §6): ``point [lo, hi]`` cells, the tables
with verdicts and per-world columns, the opening paragraph that states the rule and what the run
could detect, and the two "what it means" sentences — every verdict taken from
:mod:`gemkd.experiments.report.intervals`, none from a seed std."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gemkd.experiments.report.family import EXPLORATORY, PRIMARY
from gemkd.experiments.report.family_text import (
    DAGGER,
    family_sentence,
    headline,
    robustness_sentence,
)
from gemkd.experiments.report.intervals import GAIN, LOSS, METHOD_TEXT, UNRESOLVED
from gemkd.experiments.report.sensitivity_text import mde_sentence
from gemkd.experiments.report.summary import RunView, ci, f4, lag_str, md_table, pm
from gemkd.experiments.report.teacher_diag import (
    lower_unresolved,
    teacher_auc_better,
    teacher_better,
)
from gemkd.experiments.report.twins import twins_sentence


def ratio_ci(point: float, lo: float, hi: float, unit: str = "") -> str:
    """A ratio to 2 decimals: ``1.21× [0.95, 1.48]``."""
    if not math.isfinite(point):
        return "—"
    head = f"{point:.2f}{unit}"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return head
    return f"{head} [{lo:.2f}, {hi:.2f}]"


def _cell(r: pd.Series, name: str, lo: str, hi: str) -> str:
    return ci(r[name], r[lo], r[hi])


def verdict_cell(r: pd.Series, kind: str) -> str:
    """The verdict with its family (primary: Holm's; a resolved one outside the family:
    exploratory) and the worlds that agree on its sign, when there are several."""
    text = r[f"{kind}_verdict"]
    if not isinstance(text, str) or not text:
        return "—"
    col = "worlds_agree_delta_ne" if kind == "gain" else "worlds_agree_vs_kd"
    n = int(r["n_worlds"])
    family = r.get(f"{kind}_family", "")
    fragile = ", fragile" if r.get(f"{kind}_robustness") == "fragile" else ""
    tags = ([f"primary, Holm{fragile}"] if family == PRIMARY else
            ["exploratory"] if family == EXPLORATORY and text != UNRESOLVED else [])
    tags += [f"{int(r[col])}/{n} worlds"] if n > 1 else []
    return f"{text} ({'; '.join(tags)})" if tags else text


def _mark(cell: str, r: pd.Series, kind: str) -> str:
    """A primary comparison's interval is Holm's adjusted one: marked."""
    return cell + DAGGER if r.get(f"{kind}_family", "") == PRIMARY and "[" in cell else cell


def interval_header(run: RunView, with_worlds: bool) -> tuple[str, ...]:
    """Columns of the interval tables: the verdicts sit next to the interval they read."""
    last = "gap closed to oracle" if run.has_oracle else "calibration (Σp/Σy)"
    head: tuple[str, ...] = (
        "NE [95 % CI]", "ΔNE vs baseline [95 % CI]", "gain", "ΔNE − ΔNE(KD) [95 % CI]",
        "efficiency vs KD [95 % CI]", "vs KD", "TR [95 % CI]", "AUC (mean ± std)", last, "seeds")
    if with_worlds:
        head += tuple(f"world {w}: ΔNE (eff.)" for w in run.intervals.worlds)
    return head


def interval_row(run: RunView, r: pd.Series | None, s: pd.Series,
                 with_worlds: bool) -> list[str]:
    """Cells of one variant: intervals from ``r`` (None: no per-user files for it), AUC, the
    oracle gap or calibration and seeds from the summary row ``s``."""
    last = (pm(s["gap_closed_mean"], s["gap_closed_std"]) if run.has_oracle
            else pm(s["calibration_mean"], s["calibration_std"]))
    tail = [pm(s["auc_mean"], s["auc_std"]), last, str(int(s["n_seeds"]))]
    if r is None:
        cells = ["—"] * 7 + tail
    else:
        cells = [_cell(r, "ne", "ne_lo", "ne_hi"),
                 _mark(_cell(r, "delta_ne", "delta_ne_lo", "delta_ne_hi"), r, "gain"),
                 verdict_cell(r, "gain"),
                 _mark(_cell(r, "vs_kd", "vs_kd_lo", "vs_kd_hi"), r, "kd"),
                 _mark(ratio_ci(r["efficiency_vs_kd"], r["efficiency_lo"], r["efficiency_hi"],
                                "×"), r, "kd"),
                 verdict_cell(r, "kd"), ratio_ci(r["transfer_ratio"], r["tr_lo"], r["tr_hi"]),
                 *tail]
    if with_worlds:
        cells += _world_cells(run, s)
    return cells


def _world_cells(run: RunView, s: pd.Series) -> list[str]:
    bw = run.intervals.by_world
    bw = bw[(bw["teacher_lag_days"] == s["teacher_lag_days"]) & (bw["domain"] == s["domain"])
            & (bw["task"] == s["task"]) & (bw["variant"] == s["variant"])].set_index("world")
    cells = []
    for w in run.intervals.worlds:
        if w not in bw.index or not math.isfinite(bw.at[w, "delta_ne"]):
            cells.append("—")
            continue
        eff = bw.at[w, "efficiency_vs_kd"]
        cells.append(f4(bw.at[w, "delta_ne"]) + (f" ({eff:.2f}×)" if math.isfinite(eff) else ""))
    return cells


def interval_table(run: RunView, tasks: list[str] | None = None) -> str:
    """The main table (``tasks`` None: the main task, with a column per world when there are
    several) or the every-task table (a task column, no world columns)."""
    with_worlds = tasks is None and len(run.intervals.worlds) > 1
    rows, adjusted = [], False
    for task in tasks or [run.task]:
        iv = run.interval_rows(task=task).set_index("variant")
        for _, s in run.rows(task=task).iterrows():
            r = iv.loc[s["variant"]] if s["variant"] in iv.index else None
            names = [task, s["variant"]] if tasks else [s["variant"]]
            rows.append([*names, *interval_row(run, r, s, with_worlds)])
            adjusted |= r is not None and PRIMARY in (r.get("gain_family"), r.get("kd_family"))
    label = ("task", "variant") if tasks else ("variant",)
    table = md_table((*label, *interval_header(run, with_worlds)), rows, left=len(label))
    if adjusted:
        table += (f"\n\n{DAGGER} a primary comparison: its interval is Holm's adjusted one "
                  "(section Primary comparisons), every other interval is 95 %; a resolved "
                  "verdict outside the family is exploratory.")
    return table


def delta_cell(run: RunView, **where) -> dict[str, str]:
    """ΔNE with its interval per variant of a slice (the domain and lag tables)."""
    iv = run.interval_rows(**where)
    return {r["variant"]: _cell(r, "delta_ne", "delta_ne_lo", "delta_ne_hi")
            for _, r in iv.iterrows()}


def detectable(run: RunView) -> tuple[float, float, float, float]:
    """Median and largest half-width of ΔNE's and of ΔNE − ΔNE(KD)'s intervals over the main
    slice's variants (the reference rows, of width 0, left out)."""
    iv = run.interval_rows()
    d = iv.loc[iv["variant"] != "baseline", "delta_ne_half_width"].dropna()
    k = iv.loc[iv["variant"] != "kd", "vs_kd_half_width"].dropna()

    def stats(x: pd.Series) -> tuple[float, float]:
        return (float(np.median(x)), float(x.max())) if len(x) else (math.nan, math.nan)

    return (*stats(d), *stats(k))


def _sampled_negatives(run: RunView) -> str:
    """A sentence for a run on a positive-only log whose negatives were sampled (the run's
    ``sampled_negatives.json``): its NE and AUC are against those, not logged impressions."""
    n = run.run_dir.sampled_negatives()
    if n is None:
        return ""
    return (f" The data's negatives were sampled ({n.get('per_positive')} per positive, "
            f"{n.get('from')}, seed {n.get('seed')}: a positive-only log), so NE, AUC and "
            "calibration here are against sampled negatives, not logged impressions; compare "
            "methods with each other, not with numbers from logged data.")


def rule_paragraph(run: RunView) -> str:
    """The report's first paragraph: how intervals are made, when a verdict holds, how many
    worlds it rests on, and the smallest difference the run could resolve."""
    iv = run.intervals
    sampled = _sampled_negatives(run)
    if not iv.resolved:
        return ("This run predates per-user evaluation files (no `clusters/` folder), so it has "
                "no intervals: every number below is mean ± std over seeds, which holds neither "
                "the evaluation users' noise nor the world's, and no difference below is a "
                "verdict (DESIGN §6)." + sampled)
    n = len(iv.worlds)
    how = "; ".join(METHOD_TEXT.get(m, m) for m in iv.interval_method.split(","))
    text = family_sentence(run)  # the teacher's sentence opens the answer paragraph before it
    text += (f"Intervals are {round(100 * iv.level)} % intervals of paired differences "
            f"({iv.samples} resamples of the evaluation users, seed {iv.seed}, the same draws "
            f"for every variant): {how}. A verdict holds only when the interval excludes 0 — "
            "ΔNE for a real gain or loss, ΔNE − ΔNE(KD) for beating or falling below plain KD "
            "(efficiency vs KD beside it); the world columns and the worlds agreeing on the "
            "sign are information, not part of the rule.")
    if n == 1:
        text += (f" This run has one world (world {iv.worlds[0]}), so every verdict here is "
                 "that one world's: a second world may overturn it (DESIGN §6).")
    else:
        text += (f" Point estimates are the mean over the {n} worlds "
                 f"({', '.join(map(str, iv.worlds))}) of each world's mean over seeds; the "
                 "world columns give each world's own ΔNE (and efficiency vs KD).")
    d_med, d_max, k_med, k_max = detectable(run)
    if math.isfinite(d_med):
        text += (f" What this run could detect (domain {run.domain}, task {run.task}, lag "
                 f"{lag_str(run.lag)}): the ΔNE intervals' half-width is {f4(d_med)} (median "
                 f"over variants, at most {f4(d_max)})")
        if math.isfinite(k_med):
            text += f", that of the difference to plain KD {f4(k_med)} (at most {f4(k_max)})"
        text += "; a smaller effect reads as not resolved."
    text += mde_sentence(run)
    return text + twins_sentence(run) + sampled


def _agree(r: pd.Series, col: str) -> str:
    n = int(r["n_worlds"])
    return f" ({int(r[col])} of {n} worlds agree)" if n > 1 else ""


def _unresolved(r: pd.Series, stat: str, question: str) -> str:
    """Why a verdict is not resolved: no interval, or one that holds 0 (the verdict reads the
    interval alone)."""
    lo, hi = r[f"{stat}_lo"], r[f"{stat}_hi"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"with no interval, so {question} is not resolved"
    return (f"an interval that holds 0, so {question} is not resolved (this run resolves "
            f"about ±{f4(r[f'{stat}_half_width'])})")


def interval_sentences(run: RunView) -> list[str]:
    """The two "what it means" sentences: the primary family's resolved comparisons (never the
    best of the variants), then plain KD against the labels-only baseline; a gain is the
    teacher's knowledge reaching the student only where the teacher is better than the
    baseline."""
    rows = run.interval_rows().set_index("variant")
    has_kd = "kd" in rows.index and math.isfinite(rows.at["kd", "ne"])
    better = teacher_better(run)

    def delta(v: str) -> str:
        return _cell(rows.loc[v], "delta_ne", "delta_ne_lo", "delta_ne_hi")

    first = headline(run)
    auc_better = teacher_auc_better(run) if better is False else None
    lower = lower_unresolved(run)
    if lower is not None:
        first = (first[:-1] + " — with a teacher not resolved as better than the labels-only "
                 f"student ({lower}), a gain here is not evidence of its knowledge reaching the "
                 "student.")
    elif better is False and auc_better:
        first = (first[:-1] + " — with a teacher no better than the labels-only student on NE "
                 "but better on AUC, a gain may come from its ranking or representations, "
                 "not from better probabilities.")
    elif better is False:
        first = (first[:-1] + " — with a teacher no better than the labels-only student, none "
                 "of it is the teacher's knowledge reaching the student.")

    if not has_kd:
        second = ("Plain KD is not in this run, so it cannot be said whether KD beats the "
                  "labels-only baseline.")
    else:
        r = rows.loc["kd"]
        if f4(r["delta_ne"]) == "0.0000":  # "lowers NE by 0.0000" claimed a direction
            verb = f"changes NE by {delta('kd')}"
        elif r["delta_ne"] >= 0:
            verb = f"lowers NE by {delta('kd')}"
        else:
            verb = f"raises NE by {ci(-r['delta_ne'], -r['delta_ne_hi'], -r['delta_ne_lo'])}"
        tr = ratio_ci(r["transfer_ratio"], r["tr_lo"], r["tr_hi"])
        second = (f"Plain KD {verb} against the labels-only baseline (TR {tr}), "
                  f"{_gain(r, 'KD', better, auc_better, lower)}.")
    return [first, second, *robustness_sentence(run)]


def _gain(r: pd.Series, who: str, teacher_better: bool | None = None,
          auc_better: bool | None = None, lower: str | None = None) -> str:
    """The clause on ``r``'s ΔNE verdict; a KD gain reads as the teacher's knowledge reaching
    the student only when the teacher is better than the baseline (``teacher_better``); a
    teacher worse on NE but better on AUC (``auc_better``) may still pass on its ranking; one
    whose NE is lower, its interval holding 0 (``lower``: the difference), is not resolved."""
    agree = _agree(r, "worlds_agree_delta_ne")
    family = r.get("gain_family", "")
    tag = (" after Holm's adjustment" if family == PRIMARY else
           " (exploratory)" if family == EXPLORATORY else "")
    if r["gain_verdict"] == GAIN:
        tail = ""
        if who == "KD" and teacher_better:
            tail = ", so the teacher's knowledge reaches the student"
        elif who == "KD" and lower:  # lower NE, interval holding 0 (teacher_diag.lower_unresolved)
            tail = (", but the teacher is not resolved as better than the labels-only student "
                    f"({lower}), so the gain is not evidence of its knowledge reaching the "
                    "student (the soft targets may regularize)")
        elif who == "KD" and teacher_better is False and auc_better:
            tail = (", though the teacher is no better than the labels-only student on NE (it "
                    "is on AUC): the gain may be its ranking reaching the student, or the soft "
                    "targets regularizing")
        elif who == "KD" and teacher_better is False:
            tail = (", but the teacher is no better than the labels-only student, so the gain "
                    "is not its knowledge reaching the student (the soft targets may "
                    "regularize)")
        return f"a real gain{tag}{agree}{tail}"
    if r["gain_verdict"] == LOSS:
        return f"a real loss{tag}{agree}, so {who} hurts this student"
    target = "KD" if who == "KD" else "it"
    return _unresolved(r, "delta_ne", f"whether {target} beats the labels-only baseline")

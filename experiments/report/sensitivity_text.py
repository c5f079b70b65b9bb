"""The report's words on sensitivity: the rule paragraph's sentence on the MDE and the variance
split, and the section with each variant's MDE and what it would take to detect an effect ads
teams act on (:data:`ACTIONABLE`), from :mod:`gemkd.experiments.report.sensitivity`'s columns
and the planner (:mod:`gemkd.experiments.report.run_plan`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gemkd.experiments.report.no_signal import mde_caveat, no_signal_tasks
from gemkd.experiments.report.run_plan import plan_for
from gemkd.experiments.report.sensitivity import SOURCES
from gemkd.experiments.report.summary import RunView, f4, lag_str, md_table
from gemkd.experiments.run_dir.results_schema import BASELINE, KD


def _main_rows(run: RunView, stat: str) -> pd.DataFrame:
    rows = run.interval_rows()
    own = BASELINE if stat == "delta_ne" else run.intervals.reference
    return rows[rows["variant"] != own]


def _pct(split: dict[str, float]) -> str:
    known = {k: v for k, v in split.items() if math.isfinite(v)}
    total = sum(known.values())
    if total <= 0:
        return "—"
    return " / ".join(f"{100 * known[k] / total:.0f} %" if k in known else "—"
                      for k in SOURCES)


def mde_sentence(run: RunView) -> str:
    """The rule paragraph's sentence on the MDE and the variance split (empty without
    intervals)."""
    if not run.has_intervals:
        return ""
    parts = []
    for stat, name in (("delta_ne", "ΔNE"), ("vs_kd", "ΔNE − ΔNE(KD)")):
        rows = _main_rows(run, stat)
        mde = rows[f"{stat}_mde"].dropna()
        if mde.empty:
            continue
        text = f"{name} of {f4(float(np.median(mde)))}"
        holm = rows[f"{stat}_mde_holm"].dropna()
        if len(holm):
            text += f" ({f4(float(np.median(holm)))} for a primary comparison under Holm)"
        parts.append(text)
    if not parts:
        return ""
    split = _pct(_split(run, "delta_ne"))
    return (f" At 80 % power and two-sided {100 * (1 - run.intervals.level):.0f} % it detects a "
            f"{' and a '.join(parts)} (median over variants: the MDE, the true difference "
            "resolved 80 % of the time); ΔNE's variance is split "
            f"{split} between evaluation users / training seeds / worlds (section Sensitivity; "
            "`gemkd plan` says what a larger run would resolve)."
            + (" " + caveat if (caveat := mde_caveat(no_signal_tasks(run, [run.task]))) else ""))


def _split(run: RunView, stat: str) -> dict[str, float]:
    rows = _main_rows(run, stat)
    return {src: float(np.median(rows[f"{stat}_var_{src}"].dropna()))
            if rows[f"{stat}_var_{src}"].notna().any() else math.nan for src in SOURCES}


#: The effect an ads team acts on (~0.1 % relative NE), which the section plans for.
ACTIONABLE = 0.001


def sensitivity_section(run: RunView) -> list[str]:
    """The report's section on what the run could detect and what it would take to detect
    :data:`ACTIONABLE`."""
    if not run.has_intervals:
        return []
    t = run.csv_table  # the 95 % intervals, also for primary comparisons (their MDE's level)
    rows = t[(t["teacher_lag_days"] == run.lag) & (t["domain"] == run.domain)
             & (t["task"] == run.task)]
    level = run.intervals.level
    holm_level = rows["holm_level"].dropna()
    holm = (f" MDE (Holm): a primary comparison's at α/m = {holm_level.iloc[0]:.4f}, Holm's "
            "strictest step (what it needs when no other comparison is resolved before it)."
            if len(holm_level) else "")
    out = [f"## Sensitivity (domain {run.domain}, task {run.task}, teacher lag "
           f"{lag_str(run.lag)} days)", "",
           f"Minimum detectable effect (MDE): the true difference this run's interval excludes "
           f"0 for with 80 % probability at two-sided {100 * (1 - level):.0f} % — its standard "
           "error times the effect, in standard errors, that the interval's own reference "
           "distribution resolves (the noncentral t with the interval's df; one world: the "
           "generalized pivot at its users' share and S − 1 df; one seed: the normal, "
           f"2.80).{holm} The variance of each estimate is split into its evaluation users' "
           "part (shared by the seeds and each seed's own), the training seeds' (their search "
           "draws inside) and the worlds' (— with one world: not estimable), the components "
           "the intervals are made of.", ""]
    table = []
    for _, r in rows.iterrows():
        cells = [str(r["variant"])]
        for stat, own in (("delta_ne", BASELINE), ("vs_kd", run.intervals.reference)):
            if r["variant"] == own or not math.isfinite(r.get(f"{stat}_mde", math.nan)):
                cells += ["—"] * 4
                continue
            split = {src: r[f"{stat}_var_{src}"] for src in SOURCES}
            holm_mde = r.get(f"{stat}_mde_holm", math.nan)
            cells += [f"±{f4(r[f'{stat}_half_width'])}", f4(r[f"{stat}_mde"]),
                      f4(holm_mde) if math.isfinite(holm_mde) else "—", _pct(split)]
        table.append(cells)
    pct = round(100 * level)
    out += [md_table(("variant", f"ΔNE half-width ({pct} %)", "ΔNE MDE", "MDE (Holm)",
                      "users / seeds / worlds", f"vs KD half-width ({pct} %)", "vs KD MDE",
                      "MDE (Holm)", "users / seeds / worlds"), table), ""]
    plan = plan_for(run, ACTIONABLE, stat="vs_kd" if KD in run.variants else "delta_ne")
    if plan is not None:
        out += [plan.summary(), ""]
    if caveat := mde_caveat(no_signal_tasks(run, [run.task])):
        out += [f"**{caveat}**", ""]
    return out

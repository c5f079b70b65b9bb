"""``report.md`` of a run directory, and ``gemkd report``'s text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemkd.experiments.report.answer import answer_paragraph
from gemkd.experiments.report.cost import cost_section
from gemkd.experiments.report.day_unit import text_in_units
from gemkd.experiments.report.family_text import family_section, robustness_section
from gemkd.experiments.report.forest import PREFIX, forest_name
from gemkd.experiments.report.missing import missing_note, missing_runs
from gemkd.experiments.report.no_signal import meaning_paragraph
from gemkd.experiments.report.plots import no_ratio_reason, write_run_plots
from gemkd.experiments.report.sensitivity_text import sensitivity_section
from gemkd.experiments.report.summary import (
    RunView,
    lag_str,
    md_table,
    pm,
    seed_stats,
    variant_order,
)
from gemkd.experiments.report.table_names import ALL, PLOT_NAMES, threads_text
from gemkd.experiments.report.teacher_diag import teacher_section
from gemkd.experiments.report.text import (
    main_table,
    metric_header,
    metric_row,
    ne_above_one,
    reference_line,
    sentences,
)
from gemkd.experiments.report.tuning_edges import edge_sentences
from gemkd.experiments.report.tuning_plots import write_tuning_plots
from gemkd.experiments.report.tuning_table import knob_rows
from gemkd.experiments.report.twins import twins_section
from gemkd.experiments.report.verdicts import ci, delta_cell, interval_table, rule_paragraph
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import KD
from gemkd.transfer.io.atomic import atomic_write_bytes

INTERVALS_CSV = RunDir.INTERVALS


def render_report(run_dir: str | Path) -> str:
    """The Markdown text of a run directory's ``report.md``; nothing is written.

    Parameters
    ----------
    run_dir
        A run directory written by ``gemkd run``.

    Returns
    -------
    str

    Raises
    ------
    ConfigError
        Naming the file, column and row of a run directory that does not read.
    """
    return render(RunView(run_dir))


def render(run: RunView) -> str:
    out: list[str] = [f"# gemkd report: {run.name}", "", answer_paragraph(run), "",
                      rule_paragraph(run), ""]
    where = f"domain {run.domain}, task {run.task}, teacher lag {lag_str(run.lag)} days"
    definitions = (
        "ΔNE = NE(baseline) − NE(variant), TR = ΔNE / (NE(baseline) − NE(teacher)), "
        "efficiency vs KD = ΔNE / ΔNE(plain KD), gap closed = ΔNE / (NE(baseline) − NE(oracle)); "
        "the teacher's share of the oracle gap = (NE(baseline) − NE(teacher)) / (NE(baseline) − "
        "NE(oracle)) is how much there is to transfer.")
    if run.has_intervals:
        out += [f"Run directory `{run.dir}`; every interval is in `{INTERVALS_CSV}`. "
                f"{definitions} AUC, calibration, gap closed and the teachers' NE are mean ± std "
                "over seeds (sample std). TR is left empty (—) where the teacher's own advantage "
                "NE(baseline) − NE(teacher) has an interval that does not lie above 0, "
                "efficiency vs KD where plain KD's ΔNE has none above 0: ratios to noise mean "
                "nothing.", ""]
    else:
        out += [f"Run directory `{run.dir}`. Every number is mean ± std over seeds (sample "
                f"std); {definitions} TR is left empty (—) where the teacher's own advantage is "
                "within 2 std of the baseline's seed noise, efficiency vs KD where plain KD does "
                "not gain: ratios to noise mean nothing.", ""]
    out += _note(missing_note(run.spec, run.raw))
    threads = threads_text(run.run_dir)
    if threads:
        out += [threads, ""]
    few = run.summary[run.summary["n_seeds"] < 3]
    if not few.empty:
        out += [f"**Warning:** {len(few)} cell(s) have fewer than 3 seeds (min "
                f"{int(few['n_seeds'].min())}); DESIGN §6 asks for ≥ 3.", ""]

    out += family_section(run)
    out += robustness_section(run)
    out += [f"## Main result ({where})", "", main_table(run), ""]
    forest = run.dir / RunDir.PLOTS / forest_name(run.task, run.lag)
    if forest.is_file():
        out += [f"Forest plot (each variant's ΔNE − ΔNE(KD) with the interval its verdict "
                f"reads, every task and lag under Plots): ![{forest.stem}](plots/{forest.name})",
                ""]
    out += _note(ne_above_one(run))
    out += [f"Same evaluation data: {reference_line(run, run.task)}.", ""]
    out += teacher_data_sentence(run.run_dir, run.lag)
    out += _sources(run)
    out += cost_section(run)
    out += teacher_section(run)

    out += ["## What it means", "", meaning_paragraph(run) or " ".join(sentences(run)), ""]
    out += _efficiency_note(run)
    out += twins_section(run)
    out += sensitivity_section(run)

    out += [f"## Every task (domain {run.domain}, teacher lag {lag_str(run.lag)} days)", ""]
    if run.has_intervals:
        out += [interval_table(run, run.tasks), ""]
    else:
        rows = []
        for task in run.tasks:
            for _, r in run.rows(task=task).iterrows():
                rows.append([task, r["variant"], *metric_row(r, run.has_oracle)])
        out += [md_table(("task", "variant", *metric_header(run.has_oracle)), rows, left=2), ""]
    out += _note(ne_above_one(run, run.tasks))
    out += [f"- {task}: {reference_line(run, task)}" for task in run.tasks] + [""]

    if len([d for d in run.domains if d != ALL]) > 1:  # one domain: its column is "all"'s
        out += [f"## ΔNE vs baseline by domain (task {run.task}, teacher lag "
                f"{lag_str(run.lag)} days)", ""]
        s = run.summary[(run.summary["teacher_lag_days"] == run.lag)
                        & (run.summary["task"] == run.task)]
        cells = {d: _delta_cells(run, s[s["domain"] == d], domain=d) for d in run.domains}
        rows = [[v] + [cells[d].get(v, "—") for d in run.domains] for v in run.variants]
        out += [md_table(("variant", *run.domains), rows), ""]

    if len(run.lags) > 1:
        out += lag_section(run)

    out += _tuning_section(run)
    out += _setup_section(run)

    forests = sorted(p.name for p in (run.dir / RunDir.PLOTS).glob(f"{PREFIX}*.png"))
    present = forests + [n for n in PLOT_NAMES if (run.dir / RunDir.PLOTS / n).is_file()]
    no_ratio = no_ratio_reason(run)
    if present or no_ratio:
        out += ["## Plots", ""] + [f"![{n[:-4]}](plots/{n})" for n in present] + [""]
        out += _note(f"`transfer_ratio.png` is not drawn: {no_ratio}." if no_ratio else "")
    return text_in_units(run.run_dir, run.spec, "\n".join(out).rstrip() + "\n", after=1,
                         keep=(run.name,))


def _note(text: str) -> list[str]:
    """A paragraph under a table, or nothing."""
    return [text, ""] if text else []


def _delta_cells(run: RunView, summary: Any, **where: Any) -> dict[str, str]:
    """ΔNE per variant of one slice: with its interval, else mean ± std over seeds."""
    if run.has_intervals:
        return delta_cell(run, **where)
    return {r["variant"]: pm(r["delta_ne_mean"], r["delta_ne_std"])
            for _, r in summary.iterrows()}


def _efficiency_note(run: RunView) -> list[str]:
    """Why the efficiency column is empty, when plain KD's gain is not one."""
    if run.has_intervals:
        kd = run.interval_rows()
        kd = kd[kd["variant"] == KD]
        if kd.empty or not kd["efficiency_vs_kd"].isna().all():
            return []
        r = kd.iloc[0]
        interval = ci(r["delta_ne"], r["delta_ne_lo"], r["delta_ne_hi"])
        return ["**Efficiency vs KD is not defined here** (shown as —): plain KD's ΔNE "
                f"interval ({interval}) does not lie above 0, and a ratio to a gain that may "
                "not be one means nothing; the ΔNE − ΔNE(KD) column carries the comparison.", ""]
    kd_gain = run.cell()
    kd_gain = kd_gain[kd_gain["variant"] == KD]["delta_ne"]
    if len(kd_gain) and not (kd_gain > 0).all():
        return ["**Efficiency vs KD is not defined here** (shown as —): plain KD did not lower "
                f"NE on {int((kd_gain <= 0).sum())} of {len(kd_gain)} seeds, and a ratio to a "
                "gain that is not a gain means nothing; compare the ΔNE column instead.", ""]
    return []


def _sources(run: RunView) -> list[str]:
    """The NE of each variant's own teacher where it is not GEM (hierarchical's domain FM)."""
    rows = run.rows()
    other = rows[(rows["ne_source_mean"] - rows["ne_teacher_mean"]).abs() > 1e-9]
    if other.empty:
        return []
    gem_ne, gem_sd = seed_stats(run.cell()["ne_teacher"])
    parts, worse = [], []
    for _, r in other.iterrows():
        parts.append(f"{r['variant']} learned from a teacher of NE "
                     f"{pm(r['ne_source_mean'], r['ne_source_std'])}")
        if r["ne_source_mean"] > gem_ne:
            worse.append(f"{r['variant']} (+{r['ne_source_mean'] - gem_ne:.4f})")
    out = [f"Teachers on the same data: GEM {pm(gem_ne, gem_sd)}; " + "; ".join(parts) + "."]
    if worse:
        # two teachers' NEs on the same users: a point estimate, which the report gives no
        # interval, so the sentence states the gap rather than a verdict
        out.append(f"**The teacher of {', '.join(worse)} scores a higher NE than GEM's** on these "
                   "evaluation days (a point estimate on the same users, without an interval): "
                   "where the gap is real, it passes on less than GEM knows. A domain FM "
                   "fine-tuned from GEM "
                   "(`hierarchical: {overrides: {init_from: gem}}`) trains GEM's days again, as "
                   "a further epoch would, and over-fits where GEM's own fit kept its first "
                   "epoch; a from-scratch domain FM (`hierarchical: {config: domain_fm}`) or fewer "
                   "epochs at a lower `lr` may hold up better (docs/results/HIERARCHICAL.md).")
    return [" ".join(out), ""]


def lag_section(run: RunView) -> list[str]:
    out = [f"## ΔNE vs teacher lag (domain {run.domain}, task {run.task})", "",
           "Rows are variants, columns the teacher's age in days; below them the teacher's own "
           "advantage ΔNE_FM = NE(baseline) − NE(teacher) on the same data, the teacher's NE and "
           "the labels-only baseline's. `plots/ne_vs_lag.png` draws NE against lag per variant.",
           ""]
    s = run.summary[(run.summary["domain"] == run.domain) & (run.summary["task"] == run.task)]
    cells = {lag: _delta_cells(run, s[s["teacher_lag_days"] == lag], lag=lag)
             for lag in run.lags}
    rows = [[v] + [cells[lag].get(v, "—") for lag in run.lags] for v in run.variants]
    fm, own, base = [], [], []
    for lag in run.lags:
        c = run.cell(lag=lag).groupby(["world", "seed"])[["ne_baseline", "ne_teacher"]].mean()
        fm.append(pm(*seed_stats(c["ne_baseline"] - c["ne_teacher"])))
        own.append(pm(*seed_stats(c["ne_teacher"])))
        base.append(pm(*seed_stats(c["ne_baseline"])))
    rows.append(["teacher (ΔNE_FM)", *fm])
    rows.append(["teacher's own NE", *own])
    rows.append(["baseline's NE", *base])
    rows += teacher_data_rows(run.run_dir, run.lags)
    out += [md_table(("variant", *(f"lag {lag_str(lag)}" for lag in run.lags)), rows), ""]
    return out


def _teacher_data(run_dir: RunDir, lag: Any) -> list[dict]:
    """Each world's entry of ``teacher_data.json`` for ``lag`` (none for runs before it or with
    an imported store)."""
    return [w[str(lag)] for w in run_dir.teacher_data().values() if str(lag) in w]


def teacher_data_sentence(run_dir: RunDir, lag: Any) -> list[str]:
    """How much more the teacher learnt from than the student, at the main lag."""
    entries = _teacher_data(run_dir, lag)
    r = [e["ratio"] for e in entries if e.get("ratio")]
    if not r:
        return []
    first, end = entries[0]["teacher_days"]
    teacher = sum(e["teacher_rows"] for e in entries) / len(entries)
    student = sum(e["student_rows"] for e in entries) / len(entries)
    return [f"The teacher ({entries[0]['protocol']} protocol) learnt from {end - first} days "
            f"[{first}, {end}) of every domain, {teacher:,.0f} rows: **{sum(r) / len(r):.1f}×** "
            f"the student's {student:,.0f} training rows"
            + (f" (mean over {len(entries)} worlds)." if len(entries) > 1 else "."), ""]


def teacher_data_rows(run_dir: RunDir, lags: list) -> list[list[str]]:
    """The table rows of the teacher's days and its rows against the student's (mean over
    worlds; ``teacher_data.json``, absent for runs before it or with an imported store)."""
    if not run_dir.teacher_data():
        return []
    days, ratio = [], []
    for lag in lags:
        entries = _teacher_data(run_dir, lag)
        if not entries:
            days.append("—")
            ratio.append("—")
            continue
        first, end = entries[0]["teacher_days"]
        days.append(f"{end - first} ([{first}, {end}), {entries[0]['protocol']})")
        r = [e["ratio"] for e in entries if e.get("ratio")]
        rows = sum(e["teacher_rows"] for e in entries) / len(entries)
        ratio.append(f"{sum(r) / len(r):.1f}× ({rows:,.0f} rows)" if r else "—")
    return [["teacher's days of data", *days], ["teacher rows / student rows", *ratio]]


def _tuning_section(run: RunView) -> list[str]:
    out = ["## Tuning (validation day)", ""]
    tuning = run.run_dir.tuning()
    if tuning is None:
        return out + ["No `tuning.csv` in this run: every variant used the spec's values.", ""]
    rows = knob_rows(tuning, variant_order(tuning["variant"], run.order))
    out += ["Every variant gets the same budget; efficiency is against the tuned plain KD.", "",
            md_table(("variant", "param", "tried", "chosen", "val NE of the choice"), rows,
                     left=4), ""]
    edges = edge_sentences(tuning)
    out += ([f"- **{e}**" for e in edges] + [""]) if edges else \
        (["No chosen value sits at the edge of its searched range (a natural bound such as "
          "KD's α = 1 is not an edge)."] if "at_edge" in tuning.columns else []) + [""]
    plots = sorted((run.dir / RunDir.PLOTS).glob("tuning_*.png"))
    if plots:
        out += ["Validation NE of every trial against each knob:", ""]
        out += [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    return out


def _knob(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_knob(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_knob(v) for v in value) + "]"
    return str(value)


def _setup_section(run: RunView) -> list[str]:
    out = ["## Setup (spec.yaml)", ""]
    if run.spec is None:
        return out + ["No `spec.yaml` in this run directory.", ""]
    for key, label in (("data", "data"), ("student", "student"), ("seeds", "seeds"),
                       ("teacher_lag_days", "teacher lags (days)"), ("variants", "variants")):
        if key in run.spec:
            out.append(f"- {label}: `{_knob(run.spec[key])}`")
    absent, _ = missing_runs(run.spec, run.raw)
    if absent:
        out.append(f"- without results (missing runs): {', '.join(absent)}")
    return out + [""]


def write_plots(run_dir: str | Path) -> list[Path]:
    """Write the run's PNGs under ``run_dir/plots/`` (see :mod:`gemkd.experiments.report.plots`),
    and one of validation NE against each tuned knob per variant (``tuning_<variant>.png``)."""
    return write_plots_for(RunView(run_dir))


def write_plots_for(run: RunView) -> list[Path]:
    written = write_run_plots(run)
    tuning = run.run_dir.tuning()
    if tuning is not None and "trial" in tuning.columns:
        written += write_tuning_plots(tuning, run.dir / RunDir.PLOTS)
    return written


def write_report(run_dir: str | Path) -> Path:
    """Render and write ``run_dir/report.md`` atomically.

    Parameters
    ----------
    run_dir
        A run directory written by ``gemkd run``.

    Returns
    -------
    pathlib.Path
        The report's path.
    """
    return write_report_for(RunView(run_dir))


def write_report_for(run: RunView) -> Path:
    path = run.dir / RunDir.REPORT
    atomic_write_bytes(path, render(run).encode("utf-8"))
    return path


def write_intervals(run: RunView) -> Path:
    """``run_dir/intervals.csv``: one row per (lag, domain, task, variant), atomically: the
    95 % intervals, the verdicts (Holm's for the primary family), each verdict's family and the
    primary comparisons' adjusted p-values and intervals."""
    path = run.dir / INTERVALS_CSV
    atomic_write_bytes(path, run.csv_table.to_csv(index=False).encode("utf-8"))
    return path


def report_command(run_dir: str | Path) -> str:
    """``gemkd report RUN_DIR``: write the plots, ``report.md`` and ``intervals.csv``.

    Parameters
    ----------
    run_dir
        A run directory written by ``gemkd run``.

    Returns
    -------
    str
        The text the command prints.
    """
    run = RunView(run_dir)
    plots = write_plots_for(run)
    report = write_report_for(run)
    intervals = write_intervals(run)
    where = (f"domain {run.domain}, task {run.task}, teacher lag {lag_str(run.lag)} days")
    lines = [answer_paragraph(run), "", f"{run.name}: {where}", main_table(run), "",
             *_note(ne_above_one(run)),
             " ".join(sentences(run)), "",
             f"wrote {report}", f"wrote {intervals}"] + [f"wrote {p}" for p in plots]
    return text_in_units(run.run_dir, run.spec, "\n".join(lines), after=0, keep=(run.name,))

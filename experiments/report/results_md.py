"""docs/results/RESULTS.md: several run directories (datasets) side by side, one page, generated.

``gemkd report --markdown docs/results/RESULTS.md RUN_DIR [RUN_DIR ...]``: a summary table of
ΔNE per variant and dataset, then per dataset the rule its verdicts follow and what it could
detect, its full table (with 95 % intervals and verdicts where the run has per-user evaluation
files, else mean ± std over seeds), the teacher's NE, a pointer to the knobs tuning chose, and
the two "what it means" sentences generated from the numbers (as in each report.md), and the
Student Adapter probe's summary where ``studies/adapter_probe.py`` wrote one into the run
directory. The knobs are a table per run in a page beside it (``RESULTS.md`` →
``RESULTS_knobs.md``, :func:`knobs_path`): a replicated run chooses them per world and seed, too
many to read as a sentence.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gemkd.experiments.report.answer import answer_paragraph
from gemkd.experiments.report.day_unit import lines_in_units
from gemkd.experiments.report.family import PRIMARY
from gemkd.experiments.report.family_text import DAGGER
from gemkd.experiments.report.intervals import UNRESOLVED
from gemkd.experiments.report.missing import missing_note
from gemkd.experiments.report.render import lag_section
from gemkd.experiments.report.summary import RunView, lag_str, md_table, pm
from gemkd.experiments.report.table_names import threads_text
from gemkd.experiments.report.text import (
    main_table,
    metric_header,
    metric_row,
    ne_above_one,
    reference_line,
    sentences,
)
from gemkd.experiments.report.tuning_table import tuned_rows
from gemkd.experiments.report.verdicts import delta_cell, interval_table, rule_paragraph
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.io.atomic import atomic_write_bytes


def _dataset(run: RunView) -> str:
    data = (run.spec or {}).get("data") or {}
    source = data.get("source", "?")
    return f"{source} ({data['preset']})" if data.get("preset") else source


SAMPLED = "sampled negatives"


def _sampled(run: RunView) -> dict | None:
    """How the run's negatives were sampled (a positive-only log), or None: logged
    impressions."""
    return run.run_dir.sampled_negatives()


def run_labels(runs: list[RunView]) -> list[str]:
    """Each run's name on the page: its spec's name, with its run directory's name where
    several runs share that name (several runs of one spec), and the
    directory's parent too where those collide as well."""
    names = Counter(r.name for r in runs)
    dirs = Counter(r.dir.resolve().name for r in runs)

    def label(run: RunView) -> str:
        if names[run.name] == 1:
            return run.name
        where = run.dir.resolve()
        tail = where.name if dirs[where.name] == 1 else f"{where.parent.name}/{where.name}"
        return run.name if tail == run.name else f"{run.name} [{tail}]"

    return [label(r) for r in runs]


def _summary(runs: list[RunView], labels: list[str]) -> str:
    """ΔNE per variant and run, a column per task of the run; a run whose negatives were
    sampled has its columns marked and a footnote, since its ΔNE is against those, not logged
    impressions."""
    variants: list[str] = []
    for run in runs:
        variants += [v for v in run.variants if v not in variants]
    header, cells = ["variant"], []
    for run, label in zip(runs, labels, strict=True):
        for task in run.tasks:
            header.append(f"{label}: ΔNE {task}" + (f" ({SAMPLED}†)" if _sampled(run) else ""))
            cells.append(_deltas(run, task))
    rows = [[v, *(c.get(v, "—") for c in cells)] for v in variants]
    notes = [_footnote(label, n) for r, label in zip(runs, labels, strict=True)
             if (n := _sampled(r))]
    return "\n\n".join([md_table(header, rows), *notes])


def _footnote(name: str, negatives: dict) -> str:
    return (f"† {name}: against {SAMPLED} ({negatives.get('per_positive')} per positive, "
            f"{negatives.get('from')}, seed {negatives.get('seed')}: a positive-only log), not "
            "logged impressions: compare the variants within its column, not its numbers with "
            "another column's.")


def _deltas(run: RunView, task: str | None = None) -> dict[str, str]:
    """ΔNE per variant of the run's main slice (or ``task`` of it), with the verdict where it
    has intervals."""
    if not run.has_intervals:
        return {r["variant"]: pm(r["delta_ne_mean"], r["delta_ne_std"])
                for _, r in run.rows(task=task).iterrows()}
    rows = run.interval_rows(task=task).set_index("variant")
    return {v: cell + (f" ({_verdict(rows.loc[v])})" if rows.at[v, "gain_verdict"] else "")
            for v, cell in delta_cell(run, task=task).items()}


def _verdict(r) -> str:
    """A ΔNE verdict with its family: Holm's for a primary one (its interval adjusted, †),
    exploratory for any other resolved one."""
    text = r["gain_verdict"]
    if r.get("gain_family") == PRIMARY:
        return f"{text}, primary{DAGGER}"
    return f"{text}, exploratory" if text != UNRESOLVED else text


def _other_tasks(run: RunView) -> list[str]:
    """Every task's table, when the run has more than the main one (the main table shows the
    first task only; a loss on the second is as much a result)."""
    if len(run.tasks) < 2:
        return []
    if run.has_intervals:
        table = interval_table(run, run.tasks)
    else:
        rows = [[task, r["variant"], *metric_row(r, run.has_oracle)]
                for task in run.tasks for _, r in run.rows(task=task).iterrows()]
        table = md_table(("task", "variant", *metric_header(run.has_oracle)), rows, left=2)
    return [f"Every task (domain {run.domain}, teacher lag {lag_str(run.lag)} days):", "",
            table, ""]


#: the results page's file name where none is given (``gemkd report --markdown``'s example)
PAGE = "RESULTS.md"


def knobs_path(out: str | Path) -> Path:
    """The tuned-knobs page beside the results page ``out``: ``RESULTS.md`` →
    ``RESULTS_knobs.md``."""
    out = Path(out)
    return out.with_name(f"{out.stem}_knobs{out.suffix}")


def render_results(run_dirs: list[str | Path], title: str = "gemkd results",
                   page: str = PAGE) -> str:
    """The results page named ``page`` (its tuned knobs are pointers into the page beside it)."""
    return render_pages(run_dirs, title, page)[0]


def _knobs_pointer(run: RunView, label: str, knobs: str) -> str:
    header, _ = tuned_rows(run.run_dir.tuning(), run.variants, run.lag)
    if not header:
        return "Tuned knobs (validation day): none."
    return (f"Tuned knobs (validation day): a table in [{knobs}]({knobs}), section "
            f"“{label}”.")


def render_knobs(runs: list[RunView], labels: list[str], title: str, page: str) -> str:
    """The tuned-knobs page: per run, the knobs each variant's search chose, as a table."""
    out = [f"# {title}: tuned knobs", "",
           f"Generated with [{page}]({page}) by `gemkd report --markdown`: the knobs each "
           "variant's search chose on the validation day, at the teacher lag of that page's "
           "main tables; a row per variant and, in a replicated run, per world and per final "
           "seed's own search; — where a variant has no such knob. What each search tried: "
           "each run's report.md.", ""]
    for run, label in zip(runs, labels, strict=True):
        header, rows = tuned_rows(run.run_dir.tuning(), run.variants, run.lag)
        left = 1 + sum(h in ("world", "seed") for h in header[1:3])  # the row labels
        out += [f"## {label} — {_dataset(run)}", "",
                md_table(header, rows, left=left) if rows else "No knob was tuned.", ""]
    return "\n".join(out).rstrip() + "\n"


def render_pages(run_dirs: list[str | Path], title: str = "gemkd results", page: str = PAGE
                 ) -> tuple[str, str]:
    """The results page (named ``page``) and its tuned-knobs page (:func:`knobs_path`)."""
    runs = [RunView(d) for d in run_dirs]
    labels = run_labels(runs)
    knobs = knobs_path(page).name
    out = [f"# {title}", "",
           "Generated by `gemkd report --markdown` from the run directories below. A run with "
           "per-user evaluation files shows 95 % intervals (`point [lo, hi]`) over its users, "
           "seeds and worlds, and verdicts that hold only when the interval excludes 0; its "
           "primary comparisons (each variant against plain KD and KD against the baseline, "
           "unless its spec names others) are adjusted together by Holm's step-down at 5 %, "
           f"their intervals adjusted ({DAGGER}), and every other resolved verdict is "
           "exploratory. An older run shows mean ± std over seeds and no verdict. NE is "
           "relative to the "
           "student's training-day base rate, ΔNE = NE(baseline) − NE(variant) (higher is "
           "better). TR = ΔNE / (NE(baseline) − NE(teacher)); efficiency vs KD = ΔNE / "
           "ΔNE(tuned plain KD); both are left empty (—) where their denominator is noise or "
           "not a gain.", "",
           "## ΔNE vs the labels-only student, side by side", "", _summary(runs, labels), ""]
    for run, label in zip(runs, labels, strict=True):
        start = len(out)
        where = (f"domain {run.domain}, task {run.task}, teacher lag {lag_str(run.lag)} days, "
                 f"{int(run.rows()['n_seeds'].max())} seeds")
        marked = f" ({SAMPLED})" if _sampled(run) else ""
        out += [f"## {label} — {_dataset(run)}{marked}", "",
                answer_paragraph(run), "",
                f"Run directory `{run.dir}`; {where}. {threads_text(run.run_dir)}".rstrip(), "",
                *([note, ""] if (note := missing_note(run.spec, run.raw)) else []),
                rule_paragraph(run), "",
                main_table(run), "",
                *_other_tasks(run),
                *([note, ""] if (note := ne_above_one(run)) else []),
                f"Same evaluation data: {reference_line(run, run.task)}.", "",
                _knobs_pointer(run, label, knobs), "",
                "What holds and what does not: " + " ".join(sentences(run)), ""]
        if len(run.lags) > 1:  # a lag sweep: the staleness table, one heading level down
            lag = lag_section(run)
            out += ["#" + lag[0], *lag[1:]]
        out += adapter_probe_section(run.run_dir)
        out[start:] = lines_in_units(run.run_dir, run.spec, out[start:], 4,  # after the answer
                                     keep=(run.name, label, _dataset(run)))
    return "\n".join(out).rstrip() + "\n", render_knobs(runs, labels, title, page)


#: what ``studies/adapter_probe.py`` writes into a run directory: its summary, and which
#: tuning.csv its arms took their knobs from
PROBE_SUMMARY = Path("adapter_probe") / "summary.md"
PROBE_SOURCE = "source.json"


def adapter_probe_section(run_dir: str | Path | RunDir) -> list[str]:
    """The Student Adapter probe's summary of this run (its own gain in isolation, the targets'
    calibration before and after, the students' calibration), when the run has one."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    run_dir = run.path
    path = run_dir / PROBE_SUMMARY
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    body = lines[1:] if lines and lines[0].startswith("# ") else lines
    out = ["### The Student Adapter in isolation (`studies/adapter_probe.py`)", "",
           f"From `{path}` (`python -m studies.adapter_probe --run {run_dir}`): student arms "
           "retrained on this run's teacher stores with its chosen knobs; the learned maps are "
           f"`{path.parent}/learned_map_<arm>.png`."]
    if _probe_tuning(path.parent) != run.tuning_digest():
        out += ["", "**Outdated:** this probe's arms took their knobs from another search than "
                "the one in this run's `tuning.csv` (it was run before the run's search was "
                "redone, or records no source): its figures are of those earlier choices. "
                f"Rerun `python -m studies.adapter_probe --run {run_dir}` (it retrains the "
                "arms whose knobs changed) to refresh it."]
    return [*out, *body, ""]


def _probe_tuning(probe_dir: Path) -> str | None:
    """The tuning.csv digest the probe recorded (None: it records none)."""
    try:
        return json.loads((probe_dir / PROBE_SOURCE).read_text()).get("tuning_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def write_results(out: str | Path, run_dirs: list[str | Path], title: str = "gemkd results"
                  ) -> Path:
    """Render and write the page and its tuned-knobs page beside it (:func:`knobs_path`), each
    atomically, the knobs first; return the page's path."""
    out = Path(out)
    page, knobs = render_pages(run_dirs, title, out.name)
    atomic_write_bytes(knobs_path(out), knobs.encode("utf-8"))
    atomic_write_bytes(out, page.encode("utf-8"))
    return out

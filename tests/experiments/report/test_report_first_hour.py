"""The report's traps for a new user's first hour, each reproduced: several runs of one spec on
one page, an interrupted run's report, the plots, the cost column, the teacher's diagnostics
and a first paragraph that answers for every task."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.report import plots, render_report, report_command, write_plots
from gemkd.experiments.report.answer import MAX_WORDS, words
from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.cost import serving_inputs
from gemkd.experiments.report.missing import missing_note, missing_runs
from gemkd.experiments.report.results_md import render_results
from gemkd.experiments.report.summary import RunView
from gemkd.experiments.report.teacher_diag import constant_arm
from tests.experiments.report.cluster_run import make_cluster_run
from tests.experiments.report.test_report import CI, EFFECTS, make_results, make_run


def test_several_runs_of_one_spec_are_told_apart_by_their_directory(tmp_path):
    """Item 5: two runs of one spec (the same name) on one page: every column and heading names
    the run directory, and every task gets a column."""
    a = make_run(tmp_path / "try1", make_results())
    b = make_run(tmp_path / "try2", make_results({**EFFECTS, "kd": 0.004}))
    text = render_results([a, b])
    header = next(ln for ln in text.splitlines() if ln.startswith("| variant |"))
    assert header.split(" | ")[1:] == [
        "synthetic-bench [try1]: ΔNE click", "synthetic-bench [try1]: ΔNE conversion",
        "synthetic-bench [try2]: ΔNE click", "synthetic-bench [try2]: ΔNE conversion |"]
    assert "\n## synthetic-bench [try1] — " in text and "\n## synthetic-bench [try2] — " in text
    # the same directory name under two parents: the parent tells them apart
    c = make_run(tmp_path / "x" / "try1", make_results())
    assert "\n## synthetic-bench [x/try1] — " in render_results([a, c])
    # a run alone keeps its spec's name
    assert "\n## synthetic-bench — " in render_results([a])
    # every task's table in its section
    assert "| conversion | kd |" in text.split("\n## synthetic-bench [try1] — ")[1]


def test_an_interrupted_run_names_its_missing_runs(tmp_path):
    """Item 6: Ctrl-C after adding a variant: spec.yaml lists it, results.csv has no row of
    it, and another variant has fewer seeds than asked; the report names both."""
    results = make_results()
    results = results[~((results["variant"] == "full") & (results["seed"] == 2))]
    run = make_run(tmp_path / "r", results)
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["variants"] = [*spec["variants"], "kd_share"]
    spec["twins"] = {"kd": 1}
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    absent, partial = missing_runs(spec, results)
    assert absent == ["kd_share", "kd_twin1"]
    assert partial == {"full": (4, 6)}  # 2 seeds of 3, 2 lags
    text = render_report(run)
    note = next(ln for ln in text.splitlines() if ln.startswith("**Missing runs:**"))
    assert "kd_share, kd_twin1 (are in spec.yaml but no run of them finished" in note
    assert "full (4 of 6 runs)" in note and "rerun the same `gemkd run` command" in note
    assert text.index("**Missing runs:**") < text.index("## Main result")
    setup = text.split("## Setup")[1]
    assert "- without results (missing runs): kd_share, kd_twin1" in setup
    # a complete run says nothing
    full = make_results()
    assert missing_note(yaml.safe_load((make_run(tmp_path / "ok", full) / "spec.yaml")
                                       .read_text()), full) == ""
    assert missing_note(None, full) == "" and missing_note({"seeds": 3}, full) == ""
    assert "**Missing runs:**" in render_results([run])


def _teacher_worse(results: pd.DataFrame) -> pd.DataFrame:
    """The teacher worse than the baseline on every row: no transfer ratio anywhere."""
    out = results.copy()
    out["ne_teacher"] = out["ne_baseline"] + 0.05
    out["transfer_ratio"] = float("nan")
    return out


def test_no_transfer_ratio_plot_without_a_ratio_and_the_report_says_why(tmp_path):
    """Item 10: a run whose teacher is worse than the baseline has no transfer ratio: no empty
    transfer_ratio.png (a stale one from an earlier report is removed), and the report says
    why under Plots."""
    run = make_run(tmp_path / "r", _teacher_worse(make_results()))
    (run / "plots").mkdir()
    (run / "plots" / "transfer_ratio.png").write_bytes(b"stale")
    names = sorted(p.name for p in write_plots(run))
    assert "transfer_ratio.png" not in names and "ne_by_variant.png" in names
    assert not (run / "plots" / "transfer_ratio.png").exists()
    text = render_report(run)
    plots = text.split("## Plots")[1]
    assert "`transfer_ratio.png` is not drawn: no transfer ratio on any task" in plots
    assert "teacher's advantage NE(baseline) − NE(teacher)" in plots
    assert "transfer_ratio.png)" not in text


def test_training_curves_put_each_variant_s_loss_on_its_own_axes(tmp_path, monkeypatch):
    """Item 10: a variant's training loss is its own objective (labels only, labels + KD):
    each loss gets an axis per variant, validation NE (comparable) one axis for all."""
    run = make_run(tmp_path / "r", make_results())
    for v in ("baseline", "kd"):
        for s in (0, 1, 2):
            path = run / "curves" / f"{v}_seed{s}_lag0.csv"
            frame = pd.read_csv(path)
            frame["val_ne"] = 0.9 - 0.001 * frame["step"]
            frame.to_csv(path, index=False)
    figures = {}

    def keep(fig, path):
        figures[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    write_plots(run)
    axes = [ax for ax in figures["training_curves.png"].axes if ax.axison]
    titles = sorted(ax.get_title() for ax in axes)
    assert titles == ["baseline: kd_loss (its own objective)",
                      "baseline: train_loss (its own objective)",
                      "kd: kd_loss (its own objective)", "kd: train_loss (its own objective)",
                      "validation NE, every variant (mean over seeds)"]
    for ax in axes:
        assert len(ax.lines) == (2 if ax.get_title().startswith("validation") else 1)


# ---- item 4: the first paragraph answers for every task ------------------------------------------

def test_the_first_paragraph_answers_for_every_task_before_the_method(tmp_path):
    run = make_cluster_run(tmp_path / "c", worlds=(0, 1, 2), users=150)
    text = render_report(run)
    first = text.split("\n\n")[1]
    assert first.startswith("**In short** (domain all, teacher lag 0 days; 95 % intervals")
    assert words(first) <= MAX_WORDS
    click, conversion = first.split(" click: ")[1].split(" conversion: ")
    for part in (click, conversion):
        assert part.startswith("teacher better than labels only (NE ")
    # KD's gain is in the primary family on click only: elsewhere it is exploratory, as the
    # tables say (a new user read "love: ... real gain" as a Holm-adjusted result)
    assert re.search(rf"; KD ΔNE {CI}, real gain;", click)
    assert re.search(rf"; KD ΔNE {CI}, real gain \(exploratory\);", conversion)
    assert "Holm resolves 2 of 3 primary comparisons (kd_aux beats KD; kd a real gain)" in click
    assert "exploratory: kd_aux beats KD" in conversion  # the second task's verdicts too
    assert text.index("**In short**") < text.index("Intervals are 95 % intervals")
    assert first in report_command(run)  # the command's text too


def test_the_first_paragraph_stays_within_120_words_with_many_tasks(tmp_path):
    results = make_results()
    many = pd.concat([results.assign(task=results["task"] + f"_{i}") for i in range(8)],
                     ignore_index=True)
    run = make_run(tmp_path / "many", many, extras=False)
    first = render_report(run).split("\n\n")[1]
    assert words(first) <= MAX_WORDS
    assert first.startswith("**In short**") and "no intervals: no verdicts" in first
    assert "click_0: teacher NE 0.7800 vs labels-only 0.8020; KD ΔNE 0.0100" in first
    assert re.search(r"Also [a-z_0-9, ]+conversion_7: see Every task\.$", first)


# ---- item 2: the teacher's diagnostics ---------------------------------------------------------

def _fake_fit(run: Path, world: int, curve: list[float], select: str = "last") -> None:
    """A cached GEM fit of 2 epochs as teacher_fit writes it: config.yaml, val_metrics.json,
    metrics.csv (a validation row per epoch, then the final validation of the kept one)."""
    step = run / "cache" / f"teacher-{world:04d}"
    (step / "run").mkdir(parents=True)
    (step / "DONE").write_text("")
    (step / "config.json").write_text(json.dumps({"config": {"data": {"seed": world}}}))
    (step / "run" / "config.yaml").write_text(yaml.safe_dump(
        {"train_days": [0, 4], "val_days": [4, 5], "select": select, "max_epochs": 2}))
    (step / "run" / "val_metrics.json").write_text(json.dumps(
        {"epochs": 2, "best_epoch": 1 + min(range(len(curve)), key=curve.__getitem__)
         if select == "best" else None}))  # 1-based, as teacher_fit writes it
    rows = [{"epoch": e, "step": 10 * (e + 1), "val/ne/click/all": v}
            for e, v in enumerate(curve)] + [{"epoch": 2, "step": 21, "val/ne/click/all": 9.0}]
    pd.DataFrame(rows).to_csv(step / "run" / "metrics.csv", index=False)
    data = json.loads((run / "teacher_data.json").read_text()) \
        if (run / "teacher_data.json").is_file() else {}
    data[str(world)] = {"0": {"protocol": "window", "teacher_days": [0, 4], "teacher_rows": 1,
                              "student_days": [5, 7], "student_rows": 1, "ratio": 1.0}}
    (run / "teacher_data.json").write_text(json.dumps(data))


def test_a_teacher_worse_on_ne_but_better_on_auc_is_told_as_such(tmp_path):
    """The issue's broken teacher: worse than the labels-only student on NE, better on AUC,
    its second epoch worse on validation. The first paragraph and the teacher section say
    exactly that, with what to try; no sentence says none of a gain is its knowledge."""
    run = make_cluster_run(tmp_path / "bad", worlds=(0, 1), teacher_noise=2.6, users=150,
                           noise={"baseline": 1.6, "kd": 0.9})
    results = pd.read_csv(run / "results.csv")
    results["auc_teacher"] = results["auc"].max() + 0.05  # ranks better than every student
    results.to_csv(run / "results.csv", index=False)
    for world in (0, 1):
        _fake_fit(run, world, [0.98, 1.20])
    text = render_report(run)
    first = text.split("\n\n")[1]
    assert first.startswith("The teacher is not better than the labels-only student on the "
                            "evaluation data: NE ")
    assert "though its AUC is better: it ranks better with worse probabilities" in first
    assert "none of it is the teacher's knowledge" not in text
    section = text.split("## The teacher")[1].split("\n## ")[0]
    table = [ln for ln in section.splitlines() if ln.startswith("| click |")]
    assert [ln.split(" | ")[1] for ln in table] == [
        "teacher (GEM)", "labels-only student", "constant (training base rate)"]
    assert "| 0.5000 |" in table[2]
    assert re.search(r"- click: the teacher is worse than the labels-only student on NE "
                     r"\(\d\.\d{4} vs \d\.\d{4}\) but better on AUC \(\d\.\d{4} vs \d\.\d{4}\): "
                     r"it ranks better and predicts worse probabilities", section)
    for world in (0, 1):
        assert (f"- world {world}: 2 epoch(s) on days [0, 4), validated on [4, 5) (select: "
                "last); validation NE (click, every domain) by epoch: 1: 0.9800, 2: 1.2000; "
                "kept epoch 2, though epoch 1 validated better (0.9800): `select: best` would "
                "keep it.") in section
    assert "What to try: a validation day with early stopping (`teacher_val_days: 1`" in section
    assert "one epoch (`teacher: {overrides: {max_epochs: 1}}`" in section


def test_a_best_epoch_fit_reports_the_epoch_it_kept(tmp_path):
    """``select: best`` kept epoch 1 (val_metrics.json's 1-based ``best_epoch``): the section
    says so, and gives no advice to set what is already set."""
    run = make_cluster_run(tmp_path / "best", worlds=(0,), users=150)
    _fake_fit(run, 0, [0.8663, 0.9474], select="best")
    section = render_report(run).split("## The teacher")[1].split("\n## ")[0]
    assert ("(select: best); validation NE (click, every domain) by epoch: 1: 0.8663, "
            "2: 0.9474; kept epoch 1.") in section
    assert "would keep it" not in section


def test_a_sound_teacher_gets_no_hint_and_the_constant_arm_is_computed(tmp_path):
    run = make_cluster_run(tmp_path / "good", worlds=(0, 1), users=150)
    text = render_report(run)
    section = text.split("## The teacher")[1].split("\n## ")[0]
    assert "What to try" not in section and "not in this run's cache" in section
    assert "- click: the teacher is better than the labels-only student on NE" in section
    # the constant arm: CE(q, p̄) / H(p̄) on the evaluation rows, mean over worlds
    view = RunView(run)
    want = []
    for es in load_eval_sets(run):
        t = es.tasks.index("click")
        q = es.sums.pos[:, t].sum() / es.sums.n[:, t].sum()
        p = float(es.sums.base_rate[t])
        want.append((-q * math.log(p) - (1 - q) * math.log(1 - p))
                    / (-p * math.log(p) - (1 - p) * math.log(1 - p)))
    ne, _ = constant_arm(view, "click")
    assert ne == pytest.approx(float(np.mean(want)), rel=1e-9)
    assert f"| click | constant (training base rate) | {ne:.4f} | 0.5000 |" in section


# ---- item 11: what each gain costs -------------------------------------------------------------

def test_each_gain_has_its_training_speed_and_serving_inputs_beside_it(tmp_path):
    results = make_results()
    speed = {"baseline": 1e5, "kd": 8e4, "kd_repr": 5e4}
    results["examples_per_second"] = results["variant"].map(speed).fillna(1e5)
    results.loc[(results["variant"] == "kd_repr") & (results["seed"] == 1),
                "examples_per_second"] = 2.5e4
    run = make_run(tmp_path / "r", results)
    text = render_report(run)
    section = text.split("## What each gain costs")[1].split("\n## ")[0]
    assert "labels-only baseline's (its 100,000 examples/s)" in section
    rows = {ln.split(" | ")[0][2:]: ln for ln in section.splitlines() if ln.startswith("| ")}
    assert "baseline" not in rows
    assert rows["kd"] == "| kd | 0.0100 | 0.80× (80,000 /s) | none |"
    # seeds 0 and 2 at 0.5×, seed 1 at 0.25×: the mean of the ratios
    assert rows["kd_repr"].startswith("| kd_repr | 0.0110 | 0.42× (0.25–0.50×, 41,667 /s) | "
                                      "the user's LoopFM codes")
    assert "LoopFM codes" in rows["full"] and rows["kd_aux_adapter"].endswith("| none |")
    assert text.index("## What each gain costs") < text.index("## What it means")
    # a variant that cannot be resolved here: its serving inputs are unknown, not "none"
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["variants"] = {"mine": [{"class_path": "nowhere.Method"}]}
    assert serving_inputs(spec) is None and serving_inputs(None) is None

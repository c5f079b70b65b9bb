"""Issue 42's report side, each trap reproduced: several runs of one spec on one page (item 5),
an interrupted run's report (item 6), the plots (item 10), the cost column (item 11), the
teacher's diagnostics (item 2) and a first paragraph that answers for every task (item 4)."""

from __future__ import annotations

import pandas as pd
import yaml

from gemkd.experiments.report import plots, render_report, write_plots
from gemkd.experiments.report.missing import missing_note, missing_runs
from gemkd.experiments.report.results_md import render_results
from tests.experiments.report.test_report import EFFECTS, make_results, make_run


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

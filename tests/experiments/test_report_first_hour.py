"""Issue 42's report side, each trap reproduced: several runs of one spec on one page (item 5),
an interrupted run's report (item 6), the plots (item 10), the cost column (item 11), the
teacher's diagnostics (item 2) and a first paragraph that answers for every task (item 4)."""

from __future__ import annotations

import yaml

from gemkd.experiments.report import render_report
from gemkd.experiments.report.missing import missing_note, missing_runs
from gemkd.experiments.report.results_md import render_results
from tests.experiments.test_report import EFFECTS, make_results, make_run


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

"""A primary verdict that differs in the repeat under perturbed numerics (``RUN_DIR/perturbed``)
is marked fragile in the family, intervals.csv, the tables, the first paragraph and the headline;
one that agrees holds; a run without the repeat claims nothing."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from gemkd.experiments.report import render_report
from gemkd.experiments.report.family import COLUMNS, Family
from gemkd.experiments.report.intervals import BEATS, GAIN, UNRESOLVED
from gemkd.experiments.report.robustness import FRAGILE, HOLDS, mark
from gemkd.experiments.report.summary import RunView
from gemkd.transfer.errors import ConfigError
from tests.experiments.report.cluster_run import make_cluster_run


def _family(verdicts: dict[tuple[str, str], str]) -> Family:
    rows = [dict.fromkeys(COLUMNS, 0.001) | {"a": a, "b": b, "verdict": v}
            for (a, b), v in verdicts.items()]
    return Family(pd.DataFrame(rows, columns=COLUMNS), 0, "click", "all", 0.05, False)


def test_a_verdict_that_differs_in_the_repeat_is_fragile_one_that_agrees_holds():
    main = _family({("kd_aux", "kd"): UNRESOLVED, ("full", "kd"): BEATS,
                    ("kd", "baseline"): GAIN})
    repeat = _family({("kd", "baseline"): UNRESOLVED, ("kd_aux", "kd"): BEATS,
                      ("full", "kd"): BEATS})  # another order: matched by comparison
    marked = mark(main, repeat)
    assert marked is not None
    got = dict(zip(zip(marked.table["a"], marked.table["b"], strict=True),
                   zip(marked.table["robustness"], marked.table["perturbed_verdict"],
                       strict=True), strict=True))
    assert got == {("kd_aux", "kd"): (FRAGILE, BEATS), ("full", "kd"): (HOLDS, BEATS),
                   ("kd", "baseline"): (FRAGILE, UNRESOLVED)}
    assert list(marked.table["verdict"]) == [UNRESOLVED, BEATS, GAIN]  # the main's, unchanged
    # without a repeat nothing is claimed
    alone = mark(main, None)
    assert alone is not None and (alone.table["robustness"] == "").all()
    assert mark(None, repeat) is None


def test_a_repeat_missing_a_comparison_is_an_error_not_agreement():
    main = _family({("kd", "baseline"): GAIN, ("full", "kd"): BEATS})
    with pytest.raises(ConfigError, match="no primary comparison 'full vs kd'"):
        mark(main, _family({("kd", "baseline"): GAIN}))


NOISE = {"baseline": 1.6, "kd": 0.9, "kd_aux": 0.9}
#: the repeat: KD no better than the baseline, kd_aux far better than KD
REPEAT = {"baseline": 1.6, "kd": 1.6, "kd_aux": 0.5}


def _run(root, noise=NOISE):
    return make_cluster_run(root, worlds=(0,), seeds=(0, 1, 2), users=150, samples=100,
                            noise=noise)


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    """The main run (3 seeds, one world): KD's gain resolved, kd_aux vs KD not; untouched by
    the tests, which copy it."""
    return _run(tmp_path_factory.mktemp("robust") / "run")


def test_the_report_marks_the_flipped_verdicts_fragile(main_run, tmp_path):
    run = shutil.copytree(main_run, tmp_path / "run")
    main = RunView(run).family
    assert main is not None
    before = dict(zip(main.table["a"], main.table["verdict"], strict=True))
    assert before == {"kd_aux": UNRESOLVED, "kd": GAIN}  # the premise: KD's gain resolved
    _run(run / "perturbed", REPEAT)
    view = RunView(run)
    fam = view.family
    assert fam is not None
    assert dict(zip(fam.table["a"], fam.table["perturbed_verdict"], strict=True)) == {
        "kd_aux": BEATS, "kd": UNRESOLVED}
    assert set(fam.table["robustness"]) == {FRAGILE}
    csv = view.csv_table
    at = (csv["domain"] == "all") & (csv["task"] == "click")
    by = csv[at].set_index("variant")
    assert by.at["kd", "gain_robustness"] == FRAGILE
    assert by.at["baseline", "kd_robustness"] == FRAGILE  # the same comparison, from the baseline
    assert by.at["kd_aux", "kd_robustness"] == FRAGILE
    assert (csv[~at]["gain_robustness"] == "").all()  # outside the family: no claim
    text = render_report(run)
    first = text.split("\n\n")[1]
    assert "real gain (fragile)" in first and "kd_aux vs kd not resolved (fragile)" in first
    assert "real gain (primary, Holm, fragile)" in text
    assert "not resolved (primary, Holm, fragile)" in text
    assert "## Verdict robustness" in text
    assert "2 of 2 primary verdicts are fragile" in text


def test_a_repeat_that_agrees_holds_and_no_repeat_claims_nothing(main_run, tmp_path):
    run = shutil.copytree(main_run, tmp_path / "run")
    alone = render_report(run)
    assert "fragile" not in alone and "Verdict robustness" not in alone
    (run / "perturbed").mkdir()
    for name in ("results.csv", "spec.yaml", "clusters"):
        copy = shutil.copytree if (run / name).is_dir() else shutil.copy2
        copy(run / name, run / "perturbed" / name)
    view = RunView(run)
    assert view.family is not None and set(view.family.table["robustness"]) == {HOLDS}
    text = render_report(run)
    assert "fragile)" not in text and "| fragile |" not in text and "are fragile" not in text
    assert "All 2 primary verdicts held" in text and "## Verdict robustness" in text

"""The note under a table with NE above 1 compares the variants with the constant predictor the
teacher section prints, and names a base-rate shift with both rates where there is one (a new
user's log: "like" at 74 % positive was called a rare task under a table whose constant scored
NE 1.1157, worse than every model)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tests.experiments.report.cluster_run as cluster_run
from gemkd.experiments.report import render_report
from gemkd.experiments.report.base_rate import constant_of
from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.summary import RunView
from gemkd.experiments.report.teacher_diag import constant_arm
from tests.experiments.report.cluster_run import make_cluster_run


def _main(text: str) -> str:
    return text.split("## Main result")[1].split("\n## ")[0]


def test_a_shifted_base_rate_is_named_with_both_rates(tmp_path, monkeypatch):
    """p̄ = 10 % on the training days, ~39 % on the evaluation rows: every NE is above 1, the
    constant's more so; the note says so with both rates and the constant's NE."""
    monkeypatch.setattr(cluster_run, "BASE_RATES", {"click": 0.1, "conversion": None})
    run = make_cluster_run(tmp_path / "shift", worlds=(0, 1), users=150)
    view = RunView(run)
    c = constant_of(view, "click")
    assert c is not None and c.shifted
    q = np.mean([es.sums.pos[:, 0].sum() / es.sums.n[:, 0].sum() for es in load_eval_sets(run)])
    assert c.train == pytest.approx(0.1) and c.evaluation == pytest.approx(q)
    assert (c.ne, c.calibration) == constant_arm(view, "click")
    text = render_report(run)
    note = next(ln for ln in _main(text).splitlines() if ln.startswith("NE above 1"))
    assert note.startswith("NE above 1 (click: every variant) means worse than predicting the "
                           "training days' base rate p̄ for every row")
    assert (f"On click that constant scores NE {c.ne:.4f} here: the positive rate is 10.0 % on "
            f"the training days and {100 * q:.1f} % on the evaluation days, a base-rate shift"
            ) in note
    assert "every variant shown is better than it." in note
    assert "rare task" not in text
    # the same constant as the teacher section's table
    assert f"| click | constant (training base rate) | {c.ne:.4f} |" in text


def test_a_variant_worse_than_an_unshifted_constant_is_named(tmp_path, monkeypatch):
    """p̄ = the evaluation rows' own rate: the constant scores NE 1 and no shift is named; the
    labels-only student, with noisy logits, is above 1 and worse than that constant."""
    monkeypatch.setattr(cluster_run, "BASE_RATES", {"click": None, "conversion": None})
    run = make_cluster_run(tmp_path / "flat", worlds=(0,), users=150,
                           noise={"baseline": 4.0, "kd": 0.9})
    c = constant_of(RunView(run), "click")
    assert c is not None and not c.shifted and c.ne == pytest.approx(1.0)
    note = next(ln for ln in _main(render_report(run)).splitlines()
                if ln.startswith("NE above 1"))
    assert note.startswith("NE above 1 (click: baseline) means")
    assert re.search(r"On click that constant scores NE 1\.0000 here \(the positive rate is "
                     r"(\d+\.\d) % on the training days and \1 % on the evaluation days\); "
                     r"baseline is worse than it", note)
    assert "shift" not in note


def test_without_per_user_files_the_note_makes_no_claim_on_the_constant(tmp_path):
    """An older run (no clusters/): no constant to compare with; the note still explains NE
    above 1 without calling any task rare."""
    from tests.experiments.report.test_report import make_results, make_run

    results = make_results()
    results.loc[results["task"] == "click", ["ne", "ne_baseline"]] += 0.3
    text = render_report(make_run(tmp_path / "old", results))
    note = next(ln for ln in _main(text).splitlines() if ln.startswith("NE above 1"))
    assert "constant scores" not in note and "rare" not in note
    assert "whose evaluation days' rate moved from its training days'" in note

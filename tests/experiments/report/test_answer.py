"""The report's first sentence about the teacher says what its NE interval shows."""

from __future__ import annotations

import pandas as pd

from gemkd.experiments.report import render_report
from gemkd.experiments.report.summary import RunView
from tests.experiments.report.cluster_run import make_cluster_run


def test_a_teacher_with_lower_ne_but_an_interval_holding_0_is_not_resolved_not_worse(tmp_path):
    """A teacher whose NE is below the labels-only student's, its interval holding 0 (a real
    click log of ~90 evaluation clicks: 1.2289 vs 1.2473, [-0.0373, 0.0006]), and whose AUC is
    better: the first sentence said "not better ... it ranks better with worse probabilities",
    the opposite of its NE. It says not resolved, with the difference and its interval."""
    run = make_cluster_run(tmp_path / "r", teacher_noise=1.4, users=60,
                           noise={"baseline": 1.6, "kd": 0.9})
    results = pd.read_csv(run / "results.csv")
    results["auc_teacher"] = results["auc"].max() + 0.05  # ranks better than every student
    results.to_csv(run / "results.csv", index=False)
    table = RunView(run).intervals.table
    r = table[(table["domain"] == "all") & (table["task"] == "click")].iloc[0]
    assert r["teacher_vs_baseline"] < 0 < r["teacher_vs_baseline_hi"]  # lower NE, unresolved
    text = render_report(run)
    first = text.split("\n\n")[1]
    assert first.startswith("The teacher is not resolved as better than the labels-only student "
                            "on the evaluation data: NE ")
    assert (f"(click), difference {r['teacher_vs_baseline']:.4f} "
            f"[{r['teacher_vs_baseline_lo']:.4f}, {r['teacher_vs_baseline_hi']:.4f}], an "
            "interval that holds 0, so a gain here is not evidence of its knowledge reaching the "
            "student (section The teacher).") in first
    assert "worse probabilities" not in first and "not better than" not in first
    means = text.split("## What it means")[1].split("\n## ")[0]
    assert ("— with a teacher not resolved as better than the labels-only student (difference "
            f"{r['teacher_vs_baseline']:.4f} ") in means
    assert "a real gain after Holm's adjustment, but the teacher is not resolved as better" in means
    for wrong in ("not from better probabilities", "none of it", "no better", "(it is on AUC)"):
        assert wrong not in means

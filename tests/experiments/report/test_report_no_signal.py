"""The thin-log trial's traps: a run where no model beats the constant base-rate predictor is
said to have learnt nothing (first paragraph, NE note, MDE caveat, ``gemkd plan``), the
teacher section judges NE by the interval, flat searches flag no knob to widen, and a point
estimate that rounds to zero prints unsigned."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gemkd.experiments.report import render_report
from gemkd.experiments.report.answer import MAX_WORDS, words
from gemkd.experiments.report.no_signal import no_signal_tasks
from gemkd.experiments.report.run_plan import plan_run
from gemkd.experiments.report.summary import RunView, bound, f4
from gemkd.experiments.report.teacher_diag import check_sentence
from gemkd.experiments.report.tuning_edges import edge_sentences
from tests.experiments.report import cluster_run
from tests.experiments.report.cluster_run import make_cluster_run
from tests.experiments.report.test_report import make_results, make_run


def _at_the_base_rate(data: dict[str, np.ndarray], world: int, name: str, seed: int,
                      noise: float) -> np.ndarray:
    """Every arm predicts its task's training rate (click 0.3, conversion the evaluation's)
    plus a little noise that owes nothing to the labels: a model that learnt nothing."""
    rng = np.random.default_rng([world, seed, sum(map(ord, name))])
    q = np.where(data["mask"], data["labels"], 0).sum(0) / data["mask"].sum(0)
    rate = np.array([0.3, q[1]])
    return np.log(rate / (1 - rate)) + rng.normal(0.0, 0.02, data["truth"].shape)


@pytest.fixture(scope="module")
def flat_run(tmp_path_factory: pytest.TempPathFactory):
    mp = pytest.MonkeyPatch()
    mp.setattr(cluster_run, "arm_logits", _at_the_base_rate)
    try:
        run = make_cluster_run(tmp_path_factory.mktemp("flat") / "run", users=400)
    finally:
        mp.undo()
    return run, render_report(run)


def test_a_run_that_learnt_nothing_says_so_first(flat_run):
    run, text = flat_run
    view = RunView(run)
    assert no_signal_tasks(view) == ["click", "conversion"]
    first = text.split("\n\n")[1]
    assert first.startswith("No model beats predicting the base rate on click and conversion: "
                            "the log carries no signal these models can use at this size.")
    assert words(first) <= MAX_WORDS
    # the NE note names the constant on every such task, NE above 1 or not
    assert "Nothing was learnt: on click no arm (baseline, variants, teacher) has an NE below " \
           "the constant's" in text
    # the MDE: a caveat in the rule paragraph and the sensitivity section
    caveat = "the MDE is that of models sitting at the constant"
    assert caveat in text.split("## Sensitivity")[1].split("\n## ")[0]
    assert caveat in text.split("## Primary comparisons")[0]
    plan = plan_run(run, 0.001).text()
    assert caveat in plan and "'resolves it: yes' here is not a reason to trust" in plan
    # the teacher check: no cause asserted for a teacher at the constant
    section = text.split("## The teacher")[1].split("\n## ")[0]
    assert "memorised" not in section and "What to try" not in section
    assert "- click: " in section and "nothing was learnt on this task" in section


def test_what_it_means_says_nothing_was_learnt_instead_of_gains(flat_run):
    run, text = flat_run
    view = RunView(run)
    section = text.split("## What it means\n\n")[1].split("\n## ")[0]
    assert section.startswith(f"Nothing was learnt on {view.task} (domain {view.domain}): no "
                              "model — the labels-only baseline, any variant, the teacher — "
                              "has an NE below the constant base-rate predictor's ")
    assert "No variant gained anything" in section
    for gain_words in ("real gain", "lowers NE", "raises NE", "primary comparisons",
                       "beats the labels-only"):
        assert gain_words not in section, gain_words


def test_a_run_that_learnt_is_not_flagged(tmp_path):
    run = make_cluster_run(tmp_path / "good", users=150)
    assert no_signal_tasks(RunView(run)) == []
    text = render_report(run)
    assert "No model beats" not in text and "Nothing was learnt" not in text
    meaning = text.split("## What it means\n\n")[1].split("\n## ")[0]
    assert "primary comparisons" in meaning or "Plain KD" in meaning  # the gains, described
    assert "models sitting at the constant" not in text


def test_the_one_world_plan_says_worlds_need_replicates(tmp_path):
    run = make_cluster_run(tmp_path / "one", users=150)
    plan = plan_run(run, 0.001)
    assert "'worlds only' needs replicate worlds the run does not have (for a real log: other " \
           "logs or periods)" in plan.text()
    summary = plan.summary()
    assert "together: 1 world(s)" not in summary
    if "worlds only: not within" not in summary:
        assert "replicate worlds, which this run does not have" in summary
    assert "seeds and users together (this one world)" in summary or \
        "seeds and users ×m: not within" in summary


def test_the_teacher_check_reads_the_interval_and_a_noise_auc_edge():
    """The trial's numbers: NE 0.9982 vs 0.9983 with an interval holding 0, AUC 0.5058 vs
    0.4990 (within noise), every arm at the constant."""
    text = check_sentence("love", 0.9982, 0.5058, 0.99, 0.9983, 0.4990, 0.9981,
                          ne_diff=(-0.0003, 0.0001), learnt=False)
    assert text.startswith("love: the teacher is not resolved against the labels-only student "
                           "on NE (0.9982 vs 0.9983; the difference's interval [-0.0003, "
                           "0.0001] holds 0); no better on AUC (0.5058 vs 0.4990)")
    assert "better than" not in text and "memorised" not in text
    assert "nothing was learnt on this task" in text
    # a resolved interval and a real AUC edge read as before
    text = check_sentence("click", 0.9, 0.7, 1.0, 0.8, 0.6, 1.0, ne_diff=(0.05, 0.15))
    assert text.startswith("click: the teacher is worse than the labels-only student on NE "
                           "(0.9000 vs 0.8000) but better on AUC (0.7000 vs 0.6000): it ranks")
    # a teacher worse than the constant where something was learnt: the memorisation cause
    assert "memorised" in check_sentence("click", 1.1, 0.6, 1.0, 0.8, 0.7, 1.0,
                                         ne_diff=(0.2, 0.4))


def _study(variant: str, draw: int, val_ne: list[float], edge: str) -> list[dict]:
    best = int(np.argmin(val_ne))
    return [{"variant": variant, "teacher_lag_days": 0, "world": 0, "draw": draw, "trial": t,
             "param": "lr", "value": 0.001 * (t + 1), "val_ne": v, "chosen": t == best,
             "at_edge": edge if t == best else ""} for t, v in enumerate(val_ne)]


def test_a_flat_search_flags_no_knob_to_widen():
    flat = [1.0066, 1.0065, 1.0069, 1.0067, 1.0108]  # one diverged trial, the rest flat
    steep = [0.90, 0.87, 0.85, 0.84, 0.83]
    tuning = pd.DataFrame([*_study("kd", 0, flat, "low"), *_study("kd", 1, flat, "low"),
                           *_study("kd_aux", 0, steep, "high")])
    out = edge_sentences(tuning)
    assert len(out) == 2
    assert out[0].startswith("at_edge: kd_aux chose lr at the high end of its searched range "
                             "in 1 of 1 studies")
    assert out[1].startswith("no knob mattered in 2 search(es) whose choices sit at an edge")
    assert not any(s.startswith("at_edge: kd ") for s in out)


def test_a_zero_point_estimate_prints_unsigned_but_interval_ends_keep_their_sign(tmp_path):
    assert f4(-1e-6) == "0.0000" and f4(-0.00004) == "0.0000"
    assert bound(-2e-5) == "-0.00002" and bound(2e-5) == "0.00002"  # the verdict's digits
    results = make_results()
    results["examples_per_second"] = 1e5
    kd = results["variant"] == "kd"
    results.loc[kd, "ne"] = results.loc[kd, "ne_baseline"] + 1e-6  # ΔNE −1e-6: rounds to 0
    results.loc[kd, "delta_ne"] = -1e-6
    text = render_report(make_run(tmp_path / "r", results))
    section = text.split("## What each gain costs")[1].split("\n## ")[0]
    row = next(ln for ln in section.splitlines() if ln.startswith("| kd |"))
    assert row.startswith("| kd | 0.0000 |") and "-0.0000" not in section
    assert "lowers NE by 0.0000" not in text and "raises NE by 0.0000" not in text
    assert math.isclose(float(row.split(" | ")[1]), 0.0)

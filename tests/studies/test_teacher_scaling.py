"""``studies/teacher_scaling.py`` on a tiny streaming run: the curves come from the daily
checkpoints, the last GEM point is the run's own lag-0 teacher, the shares follow their formula
and the MLP is streamed over the same days."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from studies.teacher_scaling import log_trend, main
from tests.studies.runs import spec_run

SPEC = {
    "name": "scaling", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32}},
    "teacher_protocol": "streaming", "teacher_window_days": 1,
    "teacher_days": 4, "student_days": [4, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click"], "student_domain": "stories", "variants": ["baseline", "kd"],
    "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "lr": [0.01]}},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return spec_run(tmp_path_factory, "scaling", SPEC)


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_curves_from_the_daily_checkpoints(run, tmp_path):
    out = main(["--run", str(run), "--every", "2", "--mlp-config", "tiny", "--json",
                str(tmp_path / "s.json"), "--markdown", str(tmp_path / "s.md"), "--plots",
                str(tmp_path / "plots")])
    rows = pd.DataFrame(out["rows"])
    mine = rows[(rows.scope == "stories") & (rows.task == "click")]
    # every 2nd day's checkpoint and the last, for both models
    assert sorted(mine[mine.model == "gem"].days_seen) == [2, 4]
    assert sorted(mine[mine.model == "mlp"].days_seen) == [2, 4]
    assert sorted(p.name for p in (run / "scaling" / "mlp-w0" / "checkpoints").glob("day=*"))\
        == ["day=0.ckpt", "day=1.ckpt", "day=2.ckpt", "day=3.ckpt"]
    results = pd.read_csv(run / "results.csv")
    ref = results[(results.variant == "baseline") & (results.domain == "stories")
                  & (results.task == "click")].iloc[0]
    last = mine[(mine.model == "gem") & (mine.days_seen == 4)].iloc[0]
    # the last checkpoint is the run's lag-0 teacher (scored from its store there)
    assert last["ne"] == pytest.approx(ref["ne_teacher"], abs=2e-3)
    assert last["ne_oracle"] == pytest.approx(ref["ne_oracle"], abs=1e-6)
    assert last["share_oracle"] == pytest.approx(
        (ref["ne"] - last["ne"]) / (ref["ne"] - last["ne_oracle"]))
    assert rows.rows_seen.max() == sum(json.loads(next((run / "cache").glob(
        "data-*/data/schema.json")).read_text())["rows_per_day"][str(d)] for d in range(4))
    written = json.loads((tmp_path / "s.json").read_text())
    assert len(written["rows"]) == len(rows)
    assert "| days seen | rows seen |" in (tmp_path / "s.md").read_text()
    for name in ("teacher_scaling.png", "teacher_headroom.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 1000


def test_log_trend_recovers_a_known_slope():
    f = pd.DataFrame({"days_seen": [1, 2, 4, 8, 16], "ne": [0.9, 0.88, 0.86, 0.84, 0.82]})
    slope, icpt = log_trend(f, "ne")  # the second half: days 8 and 16
    assert slope == pytest.approx(-0.02) and icpt == pytest.approx(0.90)
    assert math.isnan(log_trend(f.iloc[:1], "ne")[0])


def test_baseline_from_the_ledger_while_the_run_goes_on(run, tmp_path):
    from studies.teacher_scaling import baseline_ne

    shutil.copy(run / "runs.jsonl", tmp_path / "runs.jsonl")
    results = pd.read_csv(run / "results.csv")
    ref = results[(results.variant == "baseline") & (results.domain == "stories")]
    assert baseline_ne(tmp_path, 0, "stories") == pytest.approx(
        ref.groupby("task")["ne"].mean().to_dict())
    assert baseline_ne(run, 0, "stories") == pytest.approx(
        ref.groupby("task")["ne"].mean().to_dict())

"""``gemkd run`` under ``teacher_protocol: streaming``: one teacher fit for every lag, the lag-L
teacher is the checkpoint of day ``teacher_days - L - 1``, and the report states how much more
data the teacher learnt from than the student."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.spec import load_spec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.store import TeacherStore

SPEC = {
    "name": "streamrun", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32}},
    "teacher_protocol": "streaming", "teacher_window_days": 1,
    "teacher_days": 4, "student_days": [4, 5], "eval_days": [5, 6], "teacher_lag_days": [0, 2],
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click"], "student_domain": "stories",
    "variants": ["baseline", "kd"],
    "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "lr": [0.01]}},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stream")
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp / "out"
    assert main(["run", str(spec), "--out", str(out)]) == 0
    return out


def test_one_fit_serves_every_lag(run):
    fits = sorted((run / "cache").glob("teacher-*"))
    assert len(fits) == 1  # the lags share the streaming fit
    ckpts = sorted(p.name for p in (fits[0] / "run" / "checkpoints").glob("day=*.ckpt"))
    assert ckpts == ["day=0.ckpt", "day=1.ckpt", "day=2.ckpt", "day=3.ckpt"]
    until = {}
    for store in (run / "cache").glob("store-*/store"):
        m = TeacherStore(store).manifest
        until[m.extra["checkpoint"].rsplit("/", 1)[-1]] = (m.trained_until_day, m.extra["days"])
    # lag 0: day 3's checkpoint, lag 2: day 1's; each store starts at its lag's 1-day window
    assert until == {"day=3.ckpt": (3, [3, 6]), "day=1.ckpt": (1, [1, 6])}
    log = (run / "log.txt").read_text()
    assert "teacher learns from days [0, 4) (streaming;" in log
    assert "teacher learns from days [0, 2) (streaming;" in log


def test_teacher_data_ratio_in_json_and_report(run):
    table = json.loads((run / "teacher_data.json").read_text())
    lag0, lag2 = table["0"]["0"], table["0"]["2"]
    assert lag0["teacher_days"] == [0, 4] and lag2["teacher_days"] == [0, 2]
    schema = json.loads(next((run / "cache").glob("data-*/data/schema.json")).read_text())
    per_day = schema["rows_per_day"]
    assert lag0["teacher_rows"] == sum(per_day[str(d)] for d in range(4))
    assert lag2["teacher_rows"] == sum(per_day[str(d)] for d in range(2))
    assert 0 < lag0["student_rows"] < per_day["4"]  # the stories domain of day 4 only
    assert lag0["ratio"] == pytest.approx(lag0["teacher_rows"] / lag0["student_rows"])
    report = (run / "report.md").read_text()
    assert (f"learnt from 4 days [0, 4) of every domain, {lag0['teacher_rows']:,} rows: "
            f"**{lag0['ratio']:.1f}×**") in report
    assert "| teacher rows / student rows |" in report
    results = pd.read_csv(run / "results.csv")
    assert sorted(results.teacher_lag_days.unique()) == [0, 2]


def test_streaming_spec_checks(tmp_path):
    bad = dict(SPEC, teacher_val_days=1)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="'teacher_val_days' must be 0"):
        load_spec(path)
    path.write_text(yaml.safe_dump(dict(SPEC, teacher_protocol="online")))
    with pytest.raises(ConfigError, match=r"key 'teacher_protocol': expected one of "
                                          r"\['window', 'streaming'\], got 'online'"):
        load_spec(path)


def test_stream_start_makes_a_teacher_of_fewer_days(tmp_path):
    from gemkd.experiments.run.preflight import plan_run

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(dict(SPEC, teacher_stream_start=1)))
    spec = load_spec(path)
    plan = plan_run(spec)
    assert plan.seen[0] == (1, 4) and plan.seen[2] == (1, 2)
    cfg = plan.teachers[2]
    assert cfg.train_days == [1, 4] and cfg.stream and cfg.val_days is None
    path.write_text(yaml.safe_dump(dict(SPEC, teacher_stream_start=2)))
    with pytest.raises(ConfigError, match=r"'teacher_stream_start' 2: .* \(< 2\)"):
        load_spec(path)
    path.write_text(yaml.safe_dump(dict(SPEC, teacher_protocol="window",
                                        teacher_stream_start=1)))
    with pytest.raises(ConfigError, match="needs teacher_protocol: streaming"):
        load_spec(path)


def test_a_store_covers_the_window_and_later_days_only(tmp_path):
    """A teacher's store starts at its window (streaming or not): a long log's early days are
    neither exported nor stored; a window teacher of every day keeps the whole-store key."""
    from gemkd.experiments.run.inputs import store_days

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    spec = load_spec(path)
    assert store_days(spec, 0) == (3, 6) and store_days(spec, 2) == (1, 6)
    path.write_text(yaml.safe_dump(dict(SPEC, teacher_protocol="window",
                                        teacher_lag_days=0, teacher_window_days=2)))
    assert store_days(load_spec(path), 0) == (2, 6)
    window_all = {k: v for k, v in SPEC.items() if k != "teacher_window_days"}
    path.write_text(yaml.safe_dump(dict(window_all, teacher_protocol="window",
                                        teacher_lag_days=0)))
    assert store_days(load_spec(path), 0) is None

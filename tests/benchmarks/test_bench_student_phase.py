"""bench_student_phase reruns a finished run's student phase from its cached steps, with packs
and one run per pass, and states both and their ratio; no finished run is a skip."""

from __future__ import annotations

import json

import pytest
import yaml

from benchmarks.bench_student_phase import main
from gemkd.experiments.cli import main as gemkd

SPEC = {
    "name": "phase", "seeds": [0, 1], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 16, "max_steps": 10}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [8]}},
    "student_tasks": ["click"], "variants": ["baseline", "kd"], "tuning": {"trials": 2},
}


def test_no_finished_run_is_skipped(tmp_path, capsys):
    out = tmp_path / "phase.json"
    assert main(["--run", str(tmp_path / "none"), "--json", str(out)]) == 0
    assert not out.exists() and "skipped" in capsys.readouterr().out


@pytest.mark.slow
def test_both_sweeps_rerun_from_the_cached_steps(tmp_path):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    run = tmp_path / "run"
    assert gemkd(["run", str(tmp_path / "spec.yaml"), "--out", str(run), "--threads", "1",
                  "--workers", "1"]) == 0
    steps = sorted(p.name for p in (run / "cache").iterdir())
    out = tmp_path / "phase.json"
    assert main(["--run", str(run), "--repeats", "1", "--workers", "1", "--json",
                 str(out)]) == 0
    got = json.loads(out.read_text())
    figs = {f["name"]: f for f in got["figures"]}
    one = figs["quickstart student phase (12 runs, --workers 1), one run per pass: seconds"]
    packs = figs["quickstart student phase, packs of up to 16: seconds"]
    ratio = figs["quickstart student phase: packs / one run per pass, students per second"]
    assert one["value"] > 0 and packs["value"] > 0
    assert ratio["value"] == pytest.approx(one["value"] / packs["value"])
    assert ratio["target"] == ">= 6" and got["seconds"]["1"] == [one["value"]]
    # the finished run's steps were reused, not trained again (nothing added to its cache)
    assert sorted(p.name for p in (run / "cache").iterdir()) == steps

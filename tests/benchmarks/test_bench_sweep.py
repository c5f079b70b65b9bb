"""bench_sweep reads a finished run's phase times into PERFORMANCE.md's figures: minutes per
phase, their total against the hour, the run's shape; no run is a skip, a broken one an error."""

from __future__ import annotations

import json

import yaml

from benchmarks.bench_sweep import main


def _run(tmp_path, phases):
    run = tmp_path / "run"
    run.mkdir()
    (run / "phases.json").write_text(json.dumps(phases))
    (run / "spec.yaml").write_text(yaml.safe_dump({
        "data": {"seeds": [0, 1, 2]}, "teacher_lag_days": [0, 3], "variants": ["baseline", "kd"]}))
    ledger = "\n".join(json.dumps({"key": f"r{i}"}) for i in range(5))
    (run / "runs.jsonl").write_text(ledger + "\n")
    (run / "command.txt").write_text("gemkd run experiments/benchmark.yaml --workers 2\n")
    return run


def test_minutes_per_phase_and_the_hour(tmp_path):
    run = _run(tmp_path, {"steps": 1800.0, "tuning": 1320.0, "final runs": 600.0})
    out = tmp_path / "sweep.json"
    assert main(["--run", str(run), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    figs = {f["name"]: f for f in got["figures"]}
    total = figs["benchmark sweep (3 worlds x 2 lags x 2 variants, 5 student runs): "
                 "wall time of its phases"]
    assert total["value"] == 62.0 and total["unit"] == "min" and total["met"] is False
    assert figs["benchmark sweep: tuning"]["value"] == 22.0
    assert got["run_command"] == "gemkd run experiments/benchmark.yaml --workers 2"


def test_no_run_is_skipped_and_a_broken_one_is_an_error(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert main(["--run", str(tmp_path / "none"), "--json", str(out)]) == 0
    assert not out.exists() and "skipped" in capsys.readouterr().out
    run = _run(tmp_path, {})
    (run / "phases.json").write_text("{not json")
    assert main(["--run", str(run), "--json", str(out)]) == 1
    assert not out.exists() and str(run) in capsys.readouterr().err
    (run / "phases.json").write_text("[1800]")  # JSON, but not phase -> seconds
    assert main(["--run", str(run), "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert not out.exists() and "phases.json: expected an object" in err

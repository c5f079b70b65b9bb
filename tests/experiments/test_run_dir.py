"""RunDir: the one reader of a run directory — its layout version, its files and their errors.
(A real tiny run read through it: tests/studies/test_adapter_probe.py, whose run it reuses.)"""

from __future__ import annotations

import json

import pytest

from gemkd.experiments.report import render_report
from gemkd.experiments.results_schema import (
    CELL_KEYS,
    REQUIRED_COLUMNS,
    RESULT_COLUMNS,
    ROW_KEYS,
    one_domain,
)
from gemkd.experiments.run_dir import LAYOUT_VERSION, RunDir, write_layout
from gemkd.transfer.errors import ConfigError
from tests.experiments.report.test_report import make_results, make_run


def test_an_old_run_without_run_json_reads_as_layout_1(tmp_path):
    run = RunDir(make_run(tmp_path / "r", make_results()))
    assert run.layout_version == 1
    results = run.results()
    assert len(results) == len(make_results()) and results["world"].eq(0).all()
    assert run.spec()["name"] == "synthetic-bench"
    assert run.tuning()["chosen"].tolist() == [False, True, True]
    curves = run.curves()
    assert set(curves["variant"]) == {"baseline", "kd"} and set(curves["seed"]) == {0, 1, 2}
    assert run.environment() == {} and run.teacher_data() == {}
    assert run.sampled_negatives() is None and not run.has_clusters() and run.ledger() == {}


def test_the_layout_version_the_runner_writes_is_read_back(tmp_path):
    write_layout(tmp_path)
    assert json.loads((tmp_path / "run.json").read_text()) == {"layout_version": LAYOUT_VERSION}
    assert RunDir(tmp_path).layout_version == LAYOUT_VERSION


def test_a_newer_layout_is_a_clear_error(tmp_path):
    run = make_run(tmp_path / "r", make_results())
    (run / "run.json").write_text(json.dumps({"layout_version": LAYOUT_VERSION + 1}))
    with pytest.raises(ConfigError, match=rf"run\.json: layout_version {LAYOUT_VERSION + 1} is "
                       r"newer than this gemkd reads .*newer gemkd"):
        RunDir(run)
    with pytest.raises(ConfigError, match="is newer than this gemkd reads"):
        render_report(run)  # the report goes through RunDir too
    with pytest.raises(ConfigError, match="is newer than this gemkd reads"):
        write_layout(run)  # the runner never mixes its files into a newer layout
    for bad in ({"layout_version": 0}, {"layout_version": "2"}, {"version": 1}, "[1"):
        (run / "run.json").write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(ConfigError, match=r"run\.json: "):
            RunDir(run)


def test_a_missing_results_file_is_named(tmp_path):
    run = RunDir(tmp_path / "empty")
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'empty' / 'results.csv'}: results "
                       "file not found"):
        run.results()
    with pytest.raises(ConfigError, match=r"spec\.yaml: spec file not found"):
        run.run_spec()


def test_paths_follow_the_layout(tmp_path):
    run = RunDir(tmp_path)
    assert run.curve_path("kd", 1, 3) == tmp_path / "curves" / "kd_seed1_lag3.csv"
    assert run.curve_path("kd", 1, 3, world=7) == tmp_path / "curves" / "kd_seed1_lag3_w7.csv"
    assert run.clusters_path(7, 3, "kd__seed1") == \
        tmp_path / "clusters" / "world=7" / "lag=3" / "kd__seed1.npz"
    (tmp_path / "clusters" / "world=7" / "lag=3").mkdir(parents=True)
    (tmp_path / "clusters" / "world=7" / "lag=oops").mkdir(parents=True)
    assert run.eval_folders() == [(7, 3, tmp_path / "clusters" / "world=7" / "lag=3")]


def test_the_ledger_s_final_runs_are_parsed(tmp_path):
    lines = [{"key": "final|kd|2|3|w5|abc123", "metrics": {"ne/click/all": 0.9}},
             {"key": "final|baseline|0|0|abc123", "metrics": {}},
             {"key": "tune|kd|0|{}|abc123", "metrics": {}}]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + "{torn")
    runs = RunDir(tmp_path).final_runs()
    assert [(r.variant, r.seed, r.lag, r.world) for r in runs] == [("kd", 2, 3, 5),
                                                                   ("baseline", 0, 0, None)]
    assert runs[0].record == {"metrics": {"ne/click/all": 0.9}}


def test_one_schema_for_writer_and_reader():
    from gemkd.experiments.report import load
    from gemkd.experiments.run import results

    assert results.RESULT_COLUMNS is RESULT_COLUMNS and load.REQUIRED_COLUMNS is REQUIRED_COLUMNS
    assert set(REQUIRED_COLUMNS) <= set(RESULT_COLUMNS) and load.CELL_KEYS is CELL_KEYS
    assert set(CELL_KEYS) < set(ROW_KEYS)
    frame = make_results()
    assert one_domain(frame) is frame  # several domains keep their pooled "all"

"""RunDir: the one writer and reader of a run directory — its layout version, its files, what
the runner writes read back, and their errors.
(A real tiny run read through it: tests/studies/test_adapter_probe.py, whose run it reuses.)"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import yaml

from gemkd.experiments.report import render_report
from gemkd.experiments.run_dir import LAYOUT_VERSION, RunDir
from gemkd.experiments.run_dir.results_schema import (
    CELL_KEYS,
    REQUIRED_COLUMNS,
    RESULT_COLUMNS,
    ROW_KEYS,
    one_domain,
)
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
    RunDir(tmp_path).write_layout()
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
        RunDir(run).write_layout()  # the runner never mixes its files into a newer layout
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


def test_a_ledger_record_is_whole_and_checked(tmp_path, caplog):
    """Appended records carry a check; a changed byte or a torn tail is not a record (a
    warning names the file and line), and the next append cuts the torn tail first."""
    run = RunDir(tmp_path)
    run.append_ledger("a", {"metrics": {"ne/click/all": 0.8123456789}})
    run.append_ledger("b", {"metrics": {"ne/click/all": 0.5}})
    assert all(json.loads(line)["check"] for line in run.ledger_path.read_text().splitlines())
    assert run.ledger() == {"a": {"metrics": {"ne/click/all": 0.8123456789}},
                            "b": {"metrics": {"ne/click/all": 0.5}}}
    text = run.ledger_path.read_text()
    run.ledger_path.write_text(text.replace("0.8123456789", "0.8123456788")[:-9])
    with caplog.at_level("WARNING"):
        assert run.ledger() == {}
    assert f"{run.ledger_path} line 1: not a whole ledger record" in caplog.text
    assert f"{run.ledger_path} line 2: not a whole ledger record" in caplog.text
    run.append_ledger("c", {"metrics": {}})
    assert run.ledger_path.read_text().splitlines()[1].startswith('{"key": "c"')
    assert list(run.ledger()) == ["c"]


def test_one_schema_for_writer_and_reader():
    from gemkd.experiments.report import table_names
    from gemkd.experiments.run import results

    assert results.RESULT_COLUMNS is RESULT_COLUMNS
    assert table_names.REQUIRED_COLUMNS is REQUIRED_COLUMNS
    assert set(REQUIRED_COLUMNS) <= set(RESULT_COLUMNS) and table_names.CELL_KEYS is CELL_KEYS
    assert set(CELL_KEYS) < set(ROW_KEYS)
    frame = make_results()
    assert one_domain(frame) is frame  # several domains keep their pooled "all"


def test_what_the_runner_writes_is_what_it_wrote_before_and_reads_back(tmp_path):
    """Each writer's bytes are those of the literal writes it replaced (the same files, names
    and contents), and each reader gets them back."""
    run = RunDir(tmp_path)
    spec = {"name": "x", "seeds": [0, 1], "data": {"overrides": {"train_days": 4}}, "a": None}
    run.write_spec(spec)
    assert (tmp_path / "spec.yaml").read_text() == yaml.safe_dump(spec, sort_keys=False)
    assert run.spec() == spec
    env = {"gemkd": "1", "threads": 2, "run_threads": 1}
    run.write_environment(env)
    assert (tmp_path / "environment.json").read_text() == json.dumps(env, indent=2)
    assert run.environment() == env
    run.write_command(["gemkd", "run", "a.yaml", "--threads", "1"])
    assert (tmp_path / "command.txt").read_text() == "gemkd run a.yaml --threads 1\n"
    assert run.command() == "gemkd run a.yaml --threads 1"
    run.write_phases({"steps": 12.345, "tuning": 3.0})
    assert (tmp_path / "phases.json").read_text() == json.dumps(
        {"steps": 12.3, "tuning": 3.0}, indent=2) + "\n"
    assert run.phases() == {"steps": 12.3, "tuning": 3.0}
    run.write_sampled_negatives({"per_positive": 4, "seed": 0})
    assert run.sampled_negatives() == {"per_positive": 4, "seed": 0}
    results = make_results()
    run.write_results(results)
    results.to_csv(tmp_path / "want.csv", index=False)
    assert run.results_path.read_bytes() == (tmp_path / "want.csv").read_bytes()
    assert len(run.results()) == len(results)
    tuning = pd.DataFrame([dict(variant="kd", param="T", value=2.0, chosen=True, val_ne=0.8)])
    run.write_tuning(tuning)
    assert run.tuning()["chosen"].tolist() == [True]
    assert run.append_ledger("final|kd|0|0|t", {"metrics": {}}) == {"metrics": {}}
    run.append_ledger("final|kd|1|0|t", {"metrics": {"ne": 1.0}})
    assert list(run.ledger()) == ["final|kd|0|0|t", "final|kd|1|0|t"]
    for world, lag in ((3, 0), (3, 2), (None, 0)):
        run.record_teacher_fit(world, lag, {"chosen_epoch": lag})
        run.record_teacher_data(world, lag, {"ratio": lag})
    assert run.teacher_fit() == {"3": {"0": {"chosen_epoch": 0}, "2": {"chosen_epoch": 2}},
                                 "0": {"0": {"chosen_epoch": 0}}}
    assert run.teacher_data()["3"]["2"] == {"ratio": 2}
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]  # atomic: no temporary left


def test_the_run_s_paths_are_its_own(tmp_path):
    run = RunDir(tmp_path)
    assert (run.log_path, run.ledger_path, run.lock_path) == (
        tmp_path / "log.txt", tmp_path / "runs.jsonl", tmp_path / ".lock")
    assert run.prepare_log_path(4) == tmp_path / "logs" / "prepare_world4.txt"
    assert run.phases() is None and run.command() == "" and not run.has_done_steps()
    (tmp_path / "cache" / "data-abc").mkdir(parents=True)
    (tmp_path / "cache" / "data-abc" / "DONE").write_text("")
    assert run.has_done_steps()


def test_a_broken_phases_file_is_named(tmp_path):
    run = RunDir(tmp_path)
    run.phases_path.write_text("[1800]")
    with pytest.raises(ConfigError, match=r"phases\.json: expected an object of phase name"):
        run.phases()
    run.phases_path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"phases\.json: not readable JSON"):
        run.phases()

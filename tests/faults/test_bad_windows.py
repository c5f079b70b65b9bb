"""Inputs that used to slip through, each now one ``error:`` line, exit code 2 and nothing
written: a day window reaching past the data (run, teacher fit, export), an unknown
student_domain (found before any work for synthetic data; for real data right after the data
step, which then leaves no run directory), a dataset with a repeated example_id, and a
checkpoint that is not there (a directory given as --ckpt)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.transfer.errors import ConfigError
from tests.faults.conftest import ROOT, SPEC, TinyRun, cli_error, export_argv, repeat_example_id

SYNTH = "spec data (synthetic, preset tiny), which has"
RUN_CASES = [
    ("eval_days=[5, 9]", f"eval_days [5, 9): days 6..8 not in {SYNTH} days 0..5"),
    ("student_domain=storiez", f"student_domain 'storiez': no such domain in {SYNTH} domains "
                               "'feed', 'stories', 'messaging'; leave student_domain out for "
                               "every domain"),
]


@pytest.mark.parametrize("setting, message", RUN_CASES, ids=[s for s, _ in RUN_CASES])
def test_run_window_or_domain_off_the_data(tmp_path, capsys, setting, message):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out), "--set", setting)
    assert err == f"error: {message}", err
    assert not out.exists()


def test_real_data_mismatch_found_after_the_data_step_leaves_no_run_dir(tmp_path, capsys):
    """An imported log's days are known only once it is converted: the check runs right after
    the data step and the run directory this run created is removed."""
    log = pd.DataFrame({"t": [1_700_000_000 + s for s in (100, 200, 300, 400, 500, 600)],
                        "user": [1, 2, 1, 3, 2, 1],
                        "item": [5, 6, 7, 5, 6, 8], "clicked": [1, 0, 1, 0, 0, 1]})
    log.to_csv(tmp_path / "log.csv", index=False)
    mapping = {"source": "shop", "time": {"column": "t", "unit": "s"}, "days": {"buckets": 3},
               "user": "user", "item": "item", "labels": {"click": "clicked"}}
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(mapping))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "data": {
        "source": "import", "src": str(tmp_path / "log.csv"),
        "overrides": {"mapping": str(tmp_path / "map.yaml")}}}))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out))
    assert err == (f"error: student_days [3, 5): days 3..4 not in spec data (import, "
                   f"{tmp_path / 'log.csv'}), which has days 0..2"), err
    assert not out.exists()


def test_teacher_fit_window_past_the_data(tiny_run: TinyRun, tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    values = yaml.safe_load((ROOT / "experiments/teacher/configs/tiny.yaml").read_text())
    for key, window in (("train_days", [0, 9]), ("val_days", [4, 8])):
        config.write_text(yaml.safe_dump({**values, key: window}))
        out = tmp_path / "out"
        err = cli_error(capsys, "teacher", "fit", "--config", str(config), "--data",
                        str(tiny_run.data), "--out", str(out))
        assert err == (f"error: {key} [{window[0]}, {window[1]}): days 6..{window[1] - 1} "
                       f"not in {tiny_run.data}, which has days 0..5"), err
        assert not out.exists()


def test_export_days_past_the_data(tiny_run, tmp_path, capsys):
    err = cli_error(capsys, *export_argv(tiny_run, tmp_path / "store", "--days", "4:7"))
    assert err == f"error: --days [4, 7): day 6 not in {tiny_run.data}, which has days 0..5"
    assert not (tmp_path / "store").exists()


def test_repeated_example_id_fails_validate(tiny_run, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(tiny_run.data, data)
    repeated, path = repeat_example_id(data)
    err = cli_error(capsys, "data", "validate", str(data))
    assert err == (f"error: {path}: column 'example_id' row 10: example_id {repeated} is "
                   f"repeated (first at {data / 'day=3' / 'part-0.parquet'} row 7); ids must be "
                   "unique"), err


def test_checkpoint_that_is_not_there(tiny_run, tmp_path, capsys):
    run_dir = tiny_run.ckpt.parent.parent
    missing = run_dir / "checkpoints" / "epoch=0.ckpt"
    err = cli_error(capsys, *_export(tiny_run, missing, tmp_path))
    assert err == f"error: --ckpt {missing}: no such checkpoint"
    err = cli_error(capsys, *_export(tiny_run, run_dir, tmp_path))
    assert err == (f"error: --ckpt {run_dir}: a directory, not a checkpoint: no last.ckpt file "
                   f"and no sharded checkpoint (.metadata) in it (did you mean "
                   f"{tiny_run.ckpt}?)"), err
    assert not (tmp_path / "store").exists()


def _export(run: TinyRun, ckpt: Path, tmp_path: Path) -> list[str]:
    argv = export_argv(run, tmp_path / "store")
    argv[argv.index("--ckpt") + 1] = str(ckpt)
    return argv


# a log whose days follow the calendar: stray rows months before the real days 75..83
STRAGGLERS = [0, 70, *range(75, 84)]


def _spec_on_stragglers(**keys):
    from gemkd.experiments.spec.load import spec_from_mapping

    return spec_from_mapping({**SPEC, "teacher_days": 80, "student_days": [80, 82],
                              "eval_days": [82, 84], **keys})


def test_the_teacher_window_not_every_day_before_it_must_be_in_the_data():
    from gemkd.experiments.run.preflight import check_data

    where = "spec data (import, log.csv)"
    check_data(_spec_on_stragglers(teacher_window_days=5), STRAGGLERS, None, None, where)
    with pytest.raises(ConfigError) as e:  # no window: every day before T is read
        check_data(_spec_on_stragglers(), STRAGGLERS, None, None, where)
    assert str(e.value) == (f"teacher_days [0, 80): days 1..69, 71..74 not in {where}, which "
                            "has days 0, 70, 75..83")
    with pytest.raises(ConfigError) as e:  # a lag's window reaching before the real days
        check_data(_spec_on_stragglers(teacher_window_days=5, teacher_lag_days=[0, 3]),
                   STRAGGLERS, None, None, where)
    assert str(e.value) == ("teacher window (teacher_days 80 - teacher_lag_days 3 - "
                            f"teacher_window_days 5) [72, 77): days 72..74 not in {where}, which "
                            "has days 0, 70, 75..83")
    with pytest.raises(ConfigError) as e:  # a streaming pass reads from its start
        check_data(_spec_on_stragglers(teacher_window_days=5, teacher_protocol="streaming",
                                       teacher_stream_start=72), STRAGGLERS, None, None, where)
    assert str(e.value).startswith("teacher_stream_start 72 to teacher_days 80 [72, 80): days "
                                   "72..74 not in")


def test_a_single_domain_logs_student_domain_error_names_its_one_domain():
    """An imported log has one domain, ``all``: the error quotes it as a name and says that
    leaving student_domain out is what serves it."""
    from gemkd.transfer.data.schema import check_domain

    check_domain("student_domain", "all", ["all"], "d")
    with pytest.raises(ConfigError) as info:
        check_domain("student_domain", "feed", ["all"], "d")
    assert str(info.value) == ("student_domain 'feed': no such domain in d, which has domain "
                               "'all'; leave student_domain out for every domain")

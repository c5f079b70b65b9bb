"""The streaming protocol of a teacher fit: one time-ordered pass with a checkpoint per day,
resumable mid-stream, and continuable onto later days with the optimizer's state."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gemkd.experiments.teacher_checkpoint import model_weights
from gemkd.experiments.teacher_config import load_teacher_config
from gemkd.experiments.teacher_export import export_teacher
from gemkd.experiments.teacher_fit import fit_teacher
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.errors import ConfigError, DataError
from gemkd.transfer.store import TeacherStore
from gemkd.transfer.training.day_checkpoints import DayCheckpoints, checkpoint_day, day_checkpoints

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "experiments/teachers/tiny.yaml"


@pytest.fixture
def cfg():
    torch.set_num_threads(1)
    c = load_teacher_config(TINY)
    return dataclasses.replace(c, train_days=[0, 3], val_days=None, max_seq_len=16,
                               batch_size=128, stream=True)


def _same_weights(a: Path, b: Path, atol: float = 1e-5) -> bool:
    wa, wb = model_weights(a), model_weights(b)
    return wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=atol) for k in wa)


def test_stream_reader_keeps_days_in_order_and_shuffles_within(tiny_data):
    plain = DatasetReader(tiny_data, days=(0, 3), batch_size=100, shuffle=True, seed=1)
    stream = DatasetReader(tiny_data, days=(0, 3), batch_size=100, shuffle=True, seed=1,
                           stream=True)
    days = [int(b.day[0]) for b in stream]
    assert days == sorted(days) and set(days) == {0, 1, 2}
    ids = np.concatenate([b.example_id.numpy() for b in stream])
    ordered = np.concatenate([b.example_id.numpy() for b in DatasetReader(
        tiny_data, days=(0, 3), batch_size=100)])
    assert sorted(ids) == sorted(ordered) and not np.array_equal(ids, ordered)  # shuffled
    assert len(plain.units) == len(stream.units)
    # day 1 is read in the same order whether the pass starts at day 0 or at day 1
    late = DatasetReader(tiny_data, days=(1, 3), batch_size=100, shuffle=True, seed=1,
                         stream=True)
    day1 = [b.example_id.numpy() for b in stream if int(b.day[0]) == 1]
    day1_late = [b.example_id.numpy() for b in late if int(b.day[0]) == 1]
    assert np.array_equal(np.concatenate(day1), np.concatenate(day1_late))


def test_stream_fit_writes_a_checkpoint_per_day(tiny_data, tmp_path, cfg):
    out = tmp_path / "run"
    summary = fit_teacher(cfg, tiny_data, out, progress=False)
    found = day_checkpoints(out / "checkpoints")
    assert sorted(found) == [0, 1, 2]
    assert _same_weights(found[2], out / "checkpoints" / "last.ckpt", atol=0)
    # last.ckpt is the last day's file (a hard link), not a copy; nothing else is kept
    assert (out / "checkpoints" / "last.ckpt").samefile(found[2])
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "day=0.ckpt", "day=1.ckpt", "day=2.ckpt", "last.ckpt"]
    assert not _same_weights(found[0], found[2])  # the model moved between days
    # one pass: each day's checkpoint was saved after that day's batches, at increasing steps
    steps = [torch.load(found[d], weights_only=False)["global_step"] for d in (0, 1, 2)]
    assert steps == sorted(steps) and steps[-1] == summary["global_step"]
    assert not list((out / "checkpoints").glob(".*tmp"))
    # a day checkpoint exports as a teacher trained until that day
    store = export_teacher(found[1], tiny_data, tmp_path / "store", days=(3, 4), progress=False)
    assert store.trained_until_day == 1
    assert TeacherStore(tmp_path / "store").manifest.trained_until_day == 1


def test_stream_resumes_mid_stream_like_an_uninterrupted_pass(tiny_data, tmp_path, cfg,
                                                              monkeypatch):
    full = tmp_path / "full"
    fit_teacher(cfg, tiny_data, full, progress=False)
    crash_at = 0
    original = DayCheckpoints.on_train_batch_start

    def crashing(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == crash_at:
            raise RuntimeError("killed")
        original(self, trainer, pl_module, batch, batch_idx)

    steps_per_day = torch.load(day_checkpoints(full / "checkpoints")[0],
                               weights_only=False)["global_step"]
    crash_at = steps_per_day + 3  # in day 1, after a step checkpoint inside day 1
    every = dataclasses.replace(cfg, checkpoint_every_n_steps=steps_per_day + 1)
    out = tmp_path / "killed"
    monkeypatch.setattr(DayCheckpoints, "on_train_batch_start", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        fit_teacher(every, tiny_data, out, progress=False)
    monkeypatch.setattr(DayCheckpoints, "on_train_batch_start", original)
    assert sorted(day_checkpoints(out / "checkpoints")) == [0]
    summary = fit_teacher(every, tiny_data, out, resume=True, progress=False)
    assert summary["resumed_from"] is not None
    found, ref = day_checkpoints(out / "checkpoints"), day_checkpoints(full / "checkpoints")
    assert sorted(found) == [0, 1, 2]
    for day in (1, 2):
        assert _same_weights(found[day], ref[day], atol=1e-4), day


def test_continue_from_equals_one_longer_stream(tiny_data, tmp_path, cfg):
    fit_teacher(cfg, tiny_data, tmp_path / "full", progress=False)
    full = day_checkpoints(tmp_path / "full" / "checkpoints")
    later = dataclasses.replace(cfg, train_days=[2, 3])
    fit_teacher(later, tiny_data, tmp_path / "later", progress=False, continue_from=full[1])
    cont = day_checkpoints(tmp_path / "later" / "checkpoints")
    assert sorted(cont) == [2]
    # weights and Adam's moments carried over, day 2 read in the same order: the model the
    # uninterrupted pass over days 0-2 ended with
    assert _same_weights(cont[2], full[2], atol=1e-4)
    # a warm start without the optimizer's state is a different model
    warm = dataclasses.replace(later, init_from=str(full[1]))
    fit_teacher(warm, tiny_data, tmp_path / "warm", progress=False)
    assert not _same_weights(day_checkpoints(tmp_path / "warm" / "checkpoints")[2], full[2],
                             atol=1e-4)


def test_continue_from_refuses_days_already_trained(tiny_data, tmp_path, cfg):
    fit_teacher(dataclasses.replace(cfg, train_days=[0, 2]), tiny_data, tmp_path / "a",
                progress=False)
    day1 = tmp_path / "a" / "checkpoints" / "day=1.ckpt"
    with pytest.raises(ConfigError, match=r"trained until day 1; train_days \[1, 3\] must "
                                          r"start after it \(day 2 or later\)"):
        fit_teacher(dataclasses.replace(cfg, train_days=[1, 3]), tiny_data, tmp_path / "b",
                    progress=False, continue_from=day1)
    assert not (tmp_path / "b").exists()
    # last.ckpt: the run's train_days say where it ended
    with pytest.raises(ConfigError, match="trained until day 1"):
        fit_teacher(dataclasses.replace(cfg, train_days=[0, 3]), tiny_data, tmp_path / "c",
                    progress=False, continue_from=tmp_path / "a" / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError, match="continue_from .*no such checkpoint"):
        fit_teacher(cfg, tiny_data, tmp_path / "d", progress=False,
                    continue_from=tmp_path / "missing.ckpt")


def test_stream_config_checks(cfg):
    with pytest.raises(ValueError, match="one pass over the days: it needs max_epochs: 1"):
        dataclasses.replace(cfg, max_epochs=2)
    with pytest.raises(ValueError, match="'continue_from' and 'init_from'"):
        dataclasses.replace(cfg, continue_from="a.ckpt", init_from="b.ckpt")
    assert checkpoint_day("x/day=12.ckpt") == 12 and checkpoint_day("last.ckpt") is None


def test_day_checkpoints_refuse_an_unordered_pass(tiny_data, tmp_path, cfg, monkeypatch):
    monkeypatch.setattr(DatasetReader, "my_units", lambda self: list(reversed(self.units)))
    with pytest.raises(DataError, match="a batch of day 1 after day 2; daily checkpoints need "
                                        "the days in time order"):
        fit_teacher(cfg, tiny_data, tmp_path / "r", progress=False)


@pytest.mark.slow  # ~1-2 min on 2 cores: make test-slow
def test_cli_stream_and_continue(tiny_data, tmp_path):
    env_cmd = [sys.executable, "-m", "gemkd.experiments.cli", "teacher", "fit", "--config",
               str(TINY), "--data", str(tiny_data), "--no-progress", "--stream"]
    run = subprocess.run([*env_cmd, "--out", str(tmp_path / "a"), "--train-days", "0:1"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(day_checkpoints(tmp_path / "a" / "checkpoints")) == [0]
    written = json.loads((tmp_path / "a" / "val_metrics.json").read_text())
    assert written["epochs"] == 1
    bad = subprocess.run([*env_cmd, "--out", str(tmp_path / "b"), "--train-days", "0:2",
                          "--continue-from", str(tmp_path / "a" / "checkpoints" / "day=0.ckpt")],
                         capture_output=True, text=True, timeout=180)
    assert bad.returncode != 0 and "must start after it (day 1 or later)" in bad.stderr
    assert not (tmp_path / "b").exists()
    ok = subprocess.run([*env_cmd, "--out", str(tmp_path / "c"), "--train-days", "1:2",
                         "--continue-from", str(tmp_path / "a" / "checkpoints" / "day=0.ckpt")],
                        capture_output=True, text=True, timeout=180)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert sorted(day_checkpoints(tmp_path / "c" / "checkpoints")) == [1]

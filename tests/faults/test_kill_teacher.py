"""Trap (d) of the first real log: a teacher killed mid-epoch restarted from zero (its only
checkpoints were at epoch ends). A fit now also saves ``last.ckpt`` every few minutes of
training, mid-epoch, and a resumed fit continues from that batch of that pass."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.training.ranking_module import RankingModule
from tests.faults.forked import fork_gemkd
from tests.transfer.training.test_resume import TINY

STEPS = 40  # one epoch of the tiny data's train days is 252 batches: every step is mid-epoch


def _config(tmp_path: Path) -> Path:
    """The tiny teacher as shipped (no checkpoint_every_n_steps), STEPS steps."""
    values = yaml.safe_load(TINY.read_text())
    values.update(max_seq_len=16, max_steps=STEPS)
    assert values["checkpoint_every_n_steps"] is None and values["max_epochs"] == 1
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _argv(config: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["teacher", "fit", "--config", str(config), "--data", str(data), "--out", str(out),
            "--no-progress", *extra]


def test_a_teacher_killed_mid_epoch_resumes_from_that_batch(tiny_data, tmp_path, monkeypatch):
    # a save after every batch here (the default: every 10 minutes of training)
    monkeypatch.setattr("gemkd.transfer.training.trainer.CHECKPOINT_MINUTES", 0.0,
                        raising=False)
    config = _config(tmp_path)
    full = tmp_path / "full"
    assert main(_argv(config, tiny_data, full)) == 0
    reference = json.loads((full / "val_metrics.json").read_text())
    assert reference["global_step"] == STEPS

    out = tmp_path / "killed"
    child = fork_gemkd(_argv(config, tiny_data, out), tmp_path / "child",
                       pause="teacher.step10")
    child.wait_paused()
    child.kill()
    last = out / "checkpoints" / "last.ckpt"
    assert last.is_file(), "killed mid-epoch without a checkpoint: the fit restarts from zero"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == 10 and state["epoch"] == 0
    progress = state["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert progress["processed"] == 10  # the pass's position, restored on resume

    steps: list[int] = []
    step = RankingModule.training_step

    def counted(self, *args, **kwargs):
        steps.append(self.trainer.global_step)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(RankingModule, "training_step", counted)
    assert main(_argv(config, tiny_data, out, "--resume")) == 0
    resumed = json.loads((out / "val_metrics.json").read_text())
    assert resumed["resumed_from"] == str(last)
    assert steps == list(range(10, STEPS))  # the 30 batches after the checkpoint, no more
    assert resumed["global_step"] == STEPS
    for task in ("click", "conversion", "engage"):
        key = f"ne/{task}/all"  # the same batches as the uninterrupted run: the same model
        assert abs(resumed["val"][key] - reference["val"][key]) < 1e-3, (task, resumed)


def test_the_default_saves_every_ten_minutes_mid_epoch():
    from gemkd.transfer.training.timed_checkpoint import TimedCheckpoint
    from gemkd.transfer.training.trainer import CHECKPOINT_MINUTES, build_trainer

    assert CHECKPOINT_MINUTES == 10.0
    trainer = build_trainer("unused", progress_bar=False)
    (timed,) = [c for c in trainer.callbacks if isinstance(c, TimedCheckpoint)]
    assert timed.seconds == 600.0 and timed.path.name == "last.ckpt"
    never = build_trainer("unused", progress_bar=False, checkpoint_every_minutes=float("inf"))
    assert not any(isinstance(c, TimedCheckpoint) for c in never.callbacks)

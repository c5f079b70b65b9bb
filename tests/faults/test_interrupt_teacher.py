"""Ctrl-C or SIGTERM during a teacher fit: the fit finishes the batch in flight, saves
``last.ckpt`` and stops (exit 130 / 143); ``--resume`` continues with the next batch. Trap 7 of
the second real log: an interrupted teacher restarted from zero (its only saves were at epoch
ends and every ten minutes)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch

from gemkd.experiments.cli import main
from gemkd.transfer.training.interrupt_checkpoint import InterruptCheckpoint
from gemkd.transfer.training.ranking_module import RankingModule
from tests.faults.forked import fork_gemkd
from tests.faults.test_kill_teacher import STEPS, _argv, _config

AT = 10  # the step the signal arrives in


def _hold_step_until_signalled(monkeypatch, sentinel) -> None:
    """In a child forked after this, training step AT waits (touching ``sentinel``) until the
    fit's InterruptCheckpoint holds a signal, then trains: the signal came mid-batch."""
    step = RankingModule.training_step

    def held(self, *args, **kwargs):
        if self.trainer.global_step == AT:
            (cb,) = [c for c in self.trainer.callbacks if isinstance(c, InterruptCheckpoint)]
            sentinel.touch()
            while cb._pending is None:
                time.sleep(0.01)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(RankingModule, "training_step", held)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_interrupted_teacher_fit_resumes_at_the_next_batch(tiny_data, tmp_path, monkeypatch,
                                                              signum):
    config = _config(tmp_path)
    out, work = tmp_path / "run", tmp_path / "child"
    work.mkdir()
    _hold_step_until_signalled(monkeypatch, work / "paused")
    child = fork_gemkd(_argv(config, tiny_data, out), work)
    monkeypatch.undo()
    child.wait_paused()
    os.kill(child.pid, signum)
    assert child.wait() == 128 + signum, child.output()[-3000:]
    assert "Traceback" not in child.output(), child.output()[-3000:]
    assert "rerun the same command with --resume" in child.output()

    last = out / "checkpoints" / "last.ckpt"
    assert last.is_file(), "interrupted without a checkpoint: the fit restarts from zero"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == AT + 1  # the batch in flight was finished, then saved
    progress = state["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert progress["processed"] == AT + 1

    steps: list[int] = []
    step = RankingModule.training_step

    def counted(self, *args, **kwargs):
        steps.append(self.trainer.global_step)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(RankingModule, "training_step", counted)
    assert main(_argv(config, tiny_data, out, "--resume")) == 0
    assert steps == list(range(AT + 1, STEPS))  # from the next batch, not from zero
    assert json.loads((out / "val_metrics.json").read_text())["global_step"] == STEPS


def test_handlers_are_put_back_after_a_fit_and_a_command(tiny_data, tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert main(_argv(_config(tmp_path), tiny_data, tmp_path / "run")) == 0
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_run_leaves_the_handlers_as_it_found_them(tiny_run, tmp_path):
    """A handler installed during the suite once outlived its test, and a CI time limit's
    SIGTERM surfaced as ``SystemExit: 15`` inside a later test."""
    from tests.faults.conftest import gemkd_run

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert gemkd_run(tiny_run.spec, tmp_path / "run") == 0  # teacher, store and student fits
    assert {s: signal.getsignal(s) for s in before} == before

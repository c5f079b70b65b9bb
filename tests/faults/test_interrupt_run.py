"""Ctrl-C (SIGINT) or SIGTERM during ``gemkd run``: one line on stderr saying what is kept and how
to go on, the same line at the end of the run's log.txt, exit code 130 (143); the rerun resumes,
a teacher interrupted mid-fit from the batch after the signal. Trap (d): an
interrupt ended the command silently, inside a teacher fit as a plain exit 1 (Lightning turns a
KeyboardInterrupt into ``sys.exit(1)``)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from gemkd.experiments.cli.interrupt import EXIT_CODE, RUN_MESSAGE
from tests.faults.conftest import gemkd_run
from tests.faults.forked import fork_gemkd


def _pause_teacher_at_step(monkeypatch, sentinel, step: int) -> None:
    """In a child forked after this, the teacher fit stops (mid-epoch, inside Lightning) at
    global step ``step`` until the fit holds a signal (it finishes that batch, then stops)."""
    from gemkd.transfer.training.interrupt_checkpoint import InterruptCheckpoint
    from gemkd.transfer.training.ranking_module import RankingModule

    training_step = RankingModule.training_step

    def paused(self, *args, **kwargs):
        if self.trainer.global_step >= step:
            (held,) = [c for c in self.trainer.callbacks if isinstance(c, InterruptCheckpoint)]
            sentinel.touch()
            while held._pending is None:
                time.sleep(0.01)
        return training_step(self, *args, **kwargs)

    monkeypatch.setattr(RankingModule, "training_step", paused)


@pytest.mark.parametrize("where, signum", [("student", signal.SIGINT),
                                           ("teacher_fit", signal.SIGINT),
                                           ("teacher_fit", signal.SIGTERM)],
                         ids=["student", "teacher_fit", "teacher_fit-sigterm"])
def test_sigint_says_so_on_stderr_and_in_log_then_the_rerun_resumes(tiny_run, tmp_path, capsys,
                                                                    monkeypatch, where, signum):
    out, work = tmp_path / "run", tmp_path / "child"
    pause = None
    if where == "teacher_fit":
        work.mkdir()
        _pause_teacher_at_step(monkeypatch, work / "paused", 3)
    else:
        pause = "run.first_student"  # in the runner, after the first student run is recorded
    child = fork_gemkd(["run", str(tiny_run.spec), "--out", str(out), "--threads", "1"], work,
                       pause=pause)
    monkeypatch.undo()  # this process's teacher trains as before
    child.wait_paused()
    os.kill(child.pid, signum)
    assert child.wait() == 128 + signum, child.output()[-3000:]  # 130, or 143 for SIGTERM
    assert EXIT_CODE == 130

    output = child.output()
    assert output.rstrip().splitlines()[-1] == RUN_MESSAGE, output[-3000:]
    assert "Traceback" not in output and "error:" not in output, output[-3000:]
    log = (out / "log.txt").read_text().rstrip().splitlines()
    assert log[-1].endswith(f" {RUN_MESSAGE}") and log[-1][:8].count(":") == 2, log[-3:]
    assert not (out / "results.csv").exists()

    capsys.readouterr()
    assert gemkd_run(tiny_run.spec, out) == 0  # the same command resumes
    rerun = capsys.readouterr().out
    assert "[cached] data (" in rerun
    if where == "student":
        assert "[cached] baseline seed 0 (runs.jsonl)" in rerun
    else:  # the teacher goes on from the batch after the signal, not from zero
        assert "[run] teacher (" in rerun
        (step,) = out.glob("cache/teacher-*")
        summary = json.loads((step / "run" / "val_metrics.json").read_text())
        assert summary["resumed_from"] is not None
    assert (out / "results.csv").is_file()


def test_an_interrupt_before_the_run_directory_exists_writes_none(tmp_path):
    from gemkd.experiments.cli.interrupt import noted_in

    log = tmp_path / "never" / "log.txt"
    with pytest.raises(KeyboardInterrupt), noted_in(log):
        raise KeyboardInterrupt
    assert not log.parent.exists()

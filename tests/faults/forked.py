"""Run a ``gemkd`` command in a forked child that stops at a chosen point, to SIGKILL it there.

A fork, not a fresh interpreter: the child inherits torch and Lightning already imported (a new
interpreter spends ~7 s importing them on this 2-core machine), yet the command runs in its own
process and dies by a real SIGKILL, with no chance to clean up. The pause points are patched
into the child only: after the step named, it touches a sentinel file and sleeps until killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

# Where a child can be made to stop, in the order an export reaches them.
PAUSES = {
    "export.predicting": "after the first batch reached StoreWriter.write (staging dir exists)",
    "export.closed": "after StoreWriter.close: every shard complete in staging, no manifest",
    "export.manifest": "after manifest.json is written in staging: only the rename is left",
    "export.finalized": "after StoreWriter.finalize: the store is in place",
    "run.first_student": "after gemkd run recorded its first student run in runs.jsonl",
    "teacher.step10": "as a teacher starts its training step after global step 10 (mid-epoch)",
}


@dataclass
class Child:
    """A forked ``gemkd`` command; its stdout and stderr go to ``log``."""

    pid: int
    log: Path
    sentinel: Path
    returncode: int | None = None

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def _poll(self) -> bool:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode is not None

    def wait_paused(self, timeout: float = 120) -> None:
        """Block until the child reached its pause point (fails if it exited first)."""
        self.wait_until(self.sentinel.exists, "its pause point", timeout)

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Block until ``condition()`` holds, a sign the command gives as it runs (a file it
        writes). Fails at once, with the child's output, if the child exits first; fails
        naming ``what`` it waited for, after killing the child, if ``timeout`` s pass."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self._poll():
                pytest.fail(f"child exited {self.returncode} before {what}:\n"
                            f"{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"child did not reach {what} within {timeout} s:\n"
                            f"{self.output()[-3000:]}")
            time.sleep(0.01)

    def kill(self) -> None:
        """SIGKILL and reap; the child must die by the signal, not exit on its own."""
        os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        assert self.returncode == -signal.SIGKILL, self.output()[-3000:]

    def wait(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while not self._poll():
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"child still running after {timeout} s:\n{self.output()[-3000:]}")
            time.sleep(0.01)
        return self.returncode


def fork_gemkd(argv: list[str], workdir: Path, pause: str | None = None,
               barrier: tuple[Path, int] | None = None) -> Child:
    """Fork a child running ``gemkd argv``; ``pause`` is a key of ``PAUSES``; ``barrier``
    ``(dir, n)`` holds every child in ``StoreWriter.finalize`` until ``n`` children arrived,
    so concurrent exports all pass their start-up checks before any of them commits."""
    assert pause is None or pause in PAUSES, pause
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "child.log"
    sentinel = workdir / "paused"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Child(pid, log, sentinel)
    code = 1
    try:  # the child: never returns into pytest
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)  # noqa: SIM115
        _forget_parent_forkserver()
        import torch

        torch.set_num_threads(1)  # no OpenMP team inherited across the fork is ever used
        _arm(pause, sentinel, barrier)
        from gemkd.experiments.cli import main

        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def _forget_parent_forkserver() -> None:
    """Make the child start its own multiprocessing forkserver if it needs one. A fork copies
    the parent's forkserver state (a session fixture's ``gemkd run`` on two cores started one
    in pytest), and a child's ``gemkd run --workers 2`` then failed starting its pool:
    ``waitpid`` of a server that is not its child raises ChildProcessError (CPython 3.11
    resets nothing at a fork). ``__init__`` again: the module's functions are bound to this
    instance; the inherited "alive" pipe end is closed so the parent's server can still end."""
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
    server.__init__()


def _stop(sentinel: Path) -> None:
    sentinel.touch()
    while True:
        time.sleep(60)


def _after(owner: object, name: str, hook: Callable[..., None]) -> None:
    """Replace ``owner.name`` by a wrapper that calls ``hook(*args)`` after the original."""
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        hook(*args, **kwargs)
        return result

    setattr(owner, name, wrapped)


def _arm(pause: str | None, sentinel: Path, barrier: tuple[Path, int] | None) -> None:
    from gemkd.experiments.run_dir import RunDir
    from gemkd.transfer.store import store_writer as writer

    stop = lambda *_, **__: _stop(sentinel)  # noqa: E731
    if pause == "export.predicting":
        _after(writer.StoreWriter, "write", stop)
    elif pause == "export.closed":
        _after(writer.StoreWriter, "close", stop)
    elif pause == "export.manifest":
        _after(writer, "atomic_write_bytes",
               lambda path, data: Path(path).name == "manifest.json" and _stop(sentinel))
    elif pause == "export.finalized":
        _after(writer.StoreWriter, "finalize", stop)
    elif pause == "run.first_student":  # once its ledger line is written
        _after(RunDir, "append_ledger", stop)
    elif pause == "teacher.step10":
        from gemkd.transfer.training.ranking_module import RankingModule

        step = RankingModule.training_step

        def stop_at_step(self, *args, **kwargs):
            if self.trainer.global_step >= 10:
                _stop(sentinel)
            return step(self, *args, **kwargs)

        RankingModule.training_step = stop_at_step
    if barrier is not None:
        directory, n = barrier
        finalize = writer.StoreWriter.finalize

        def gated(self):
            (directory / f"ready-{os.getpid()}").touch()
            deadline = time.monotonic() + 60
            while len(list(directory.glob("ready-*"))) < n and time.monotonic() < deadline:
                time.sleep(0.01)
            return finalize(self)

        writer.StoreWriter.finalize = gated

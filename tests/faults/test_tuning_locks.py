"""The tuning journals' locks after a kill: a lock dies with the process that held it, so a
rerun never waits on it; a symlink lock that an earlier version left behind (Optuna's, whose
recovery never fired under a relative ``--out``: the rerun waited forever) is removed at start,
with a note in the run's log."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

from gemkd.experiments.run.search import Search, journal_lock, run_search
from gemkd.transfer.methods import LogUniform
from tests.faults.conftest import results
from tests.faults.forked import fork_gemkd

SPACE = {"kd_weight": LogUniform(0.1, 100.0, default=1.0)}


def _acquire(lock) -> threading.Event:
    """``lock.acquire()`` in a thread (a daemon: left blocked, it ends with the session); the
    event is set once it returned."""
    got = threading.Event()
    threading.Thread(target=lambda: (lock.acquire(), got.set()), daemon=True).start()
    return got


def test_a_journal_lock_dies_with_its_holder(tmp_path):
    search = Search(SPACE, "tpe", 3, 0, tmp_path, "kd-lag0")
    held = tmp_path / "held"
    pid = os.fork()
    if pid == 0:  # the child: takes the journal's lock as an append does, then is killed
        try:
            journal_lock(search.path).acquire()
            held.touch()
            time.sleep(600)
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 60
        while not held.exists():
            assert time.monotonic() < deadline, "the child never took the lock"
            time.sleep(0.01)
        waiter = journal_lock(search.path)
        got = _acquire(waiter)
        assert not got.wait(0.5)  # a real lock: held while its holder lives
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert got.wait(10)  # the kernel dropped it at the kill
    waiter.release()
    assert _acquire(journal_lock(search.path)).wait(10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held", "kd-lag0.journal"]


def test_a_left_symlink_lock_under_a_relative_path_is_removed_with_a_note(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = Path("runs/x/tuning")  # relative, as `--out runs/x` makes it
    storage.mkdir(parents=True)
    # what Optuna's JournalFileSymlinkLock left when its holder was killed inside an append:
    # a link to the journal by the relative path it was given (dangling from its own folder)
    os.symlink("runs/x/tuning/kd-lag0.journal", storage / "kd-lag0.journal.lock")
    notes: list[str] = []
    search = Search(SPACE, "tpe", 3, 0, storage, "kd-lag0", note=notes.append)
    assert search.path.is_absolute()
    assert notes == [f"removed a stale tuning lock left by a killed run: "
                     f"{(tmp_path / storage / 'kd-lag0.journal.lock')}"]
    done = threading.Event()
    threading.Thread(target=lambda: (run_search(search, lambda p: p["kd_weight"]),
                                     done.set()), daemon=True).start()
    assert done.wait(60), "the search waited on a lock"
    assert len(search.trials()) == 3
    assert sorted(p.name for p in storage.iterdir()) == ["kd-lag0.journal"]


def test_a_rerun_with_a_relative_out_removes_left_locks(tiny_run, tmp_path, monkeypatch):
    """The run as README shows it (``--out`` relative), after a kill that left a lock beside
    every tuning journal: the rerun ends, noting each removal in its log."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_run.out, tmp_path / "runs" / "faults")
    out = Path("runs/faults")
    (tmp_path / "runs" / "faults" / "results.csv").unlink()
    journals = sorted((out / "tuning").glob("*.journal"))
    assert journals
    for j in journals:
        os.symlink(str(j), f"{j}.lock")
    child = fork_gemkd(["run", str(tiny_run.spec), "--out", str(out), "--threads", "1"],
                       tmp_path / "child")
    assert child.wait(timeout=300) == 0, child.output()[-3000:]  # a hang fails here
    log = (out / "log.txt").read_text()
    for j in journals:
        assert f"removed a stale tuning lock left by a killed run: {j.absolute()}.lock" in log
    assert not list((out / "tuning").glob("*.lock"))
    assert results(out).equals(results(tiny_run.out))

"""The tuning journals' locks after a kill: a lock dies with the process that held it, so a
rerun never waits on it; a symlink lock that an earlier version left behind (Optuna's, whose
recovery never fired under a relative ``--out``: the rerun waited forever) is removed at start,
with a note in the run's log."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.run.search import Search, journal_lock, run_search
from gemkd.transfer.methods import Categorical, LogUniform
from tests.faults.conftest import SPEC, results
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


TWO = {"kd_weight": LogUniform(0.1, 100.0, default=1.0),
       "hidden": Categorical([8, 16, 32, 64])}


def _bowl(p: dict) -> float:
    return abs(math.log(p.get("kd_weight", math.e)) - 1.0) + abs(p["hidden"] - 16) / 16


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
@pytest.mark.parametrize("params_kept", [0, 1])
def test_an_ask_cut_short_by_a_kill_is_completed_alike(tmp_path, sampler, params_kept):
    """A kill inside Optuna's ask, which writes a trial and then each param in records of
    their own: the resumed search completes that trial with the params the whole ask wrote,
    and ends with the uninterrupted search's trials."""
    space = {"kd_weight": Categorical([0.3, 1.0, 3.0]), "hidden": TWO["hidden"]} \
        if sampler == "grid" else TWO
    whole = Search(space, sampler, 8, 0, tmp_path / "whole", "kd-lag0")
    run_search(whole, _bowl)
    lines = whole.path.read_text().splitlines(keepends=True)
    ops = [json.loads(line)["op_code"] for line in lines]
    created = [i for i, op in enumerate(ops) if op == 4][5]  # the sixth trial
    # cut right after its creation, or after its first param (4: create trial, 5: set param)
    cut = created + 1 if not params_kept else ops.index(5, created) + 1
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / whole.path.name).write_text("".join(lines[:cut]))
    resumed = Search(space, sampler, 8, 0, tmp_path / "killed", "kd-lag0")
    run_search(resumed, _bowl)
    assert resumed.history() == whole.history()


def test_a_duplicate_left_untold_by_a_kill_is_told(tmp_path):
    """A kill between marking a trial a duplicate and telling it its twin's score: the
    resumed search tells it, and the budget is spent on trials, none left hanging."""
    space = {"hidden": TWO["hidden"]}
    whole = Search(space, "random", 8, 0, tmp_path / "whole", "kd-lag0")
    run_search(whole, _bowl)
    assert any(r.reused_from is not None for r in whole.history())
    lines = whole.path.read_text().splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines)
             if any(k.startswith("reused:") for k in json.loads(line).get("user_attr", {}))]
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / whole.path.name).write_text("".join(lines[:marks[0] + 1]))
    resumed = Search(space, "random", 8, 0, tmp_path / "killed", "kd-lag0")
    run_search(resumed, _bowl)
    assert resumed.history() == whole.history() and resumed.done


KILLS = 20


def _journal_bytes() -> int:
    return sum(p.stat().st_size for p in Path("run/tuning").glob("*.journal"))


@pytest.mark.slow  # a reference run of 120 trials, then 20 killed reruns and a last one: ~3 min
def test_sigkill_at_random_moments_of_tuning_then_the_rerun_matches(tmp_path, monkeypatch):
    """SIGKILL at 20 random moments of a search (a journal append among them, by chance), each
    followed by a rerun of the same command (``--out`` relative): no rerun waits on a lock, no
    lock file is left, and the last rerun ends with the uninterrupted run's choices and
    results."""
    knobs = {"kd_weight": {"low": 0.1, "high": 10.0, "log": True}, "temperature": [1.0]}
    spec = {**SPEC, "variants": ["kd"], "tuning": {"trials": 120, "knobs": knobs}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path)
    argv = ["run", "spec.yaml", "--threads", "1", "--workers", "1", "--out"]
    assert main([*argv, "reference"]) == 0

    rng, kills, cycles = random.Random(0), 0, 0
    while kills < KILLS:
        cycles += 1
        assert cycles < 3 * KILLS, f"the search ended after {kills} kills"
        size = _journal_bytes()
        child = fork_gemkd([*argv, "run"], tmp_path / f"child{cycles}")
        # in the search: once the child wrote to a journal, then at a random moment
        child.wait_until(lambda s=size: _journal_bytes() > s, "a journal write", 300)
        time.sleep(rng.uniform(0.0, 0.3))
        ledger = Path("run/runs.jsonl")
        if child._poll() or (ledger.exists() and '"final|' in ledger.read_text()):
            break  # the search is over: later kills would not be in it
        child.kill()
        kills += 1
        assert not list(Path("run/tuning").glob("*.lock")), "a lock outlived its process"
        assert "taking longer" not in child.output()
    assert kills >= KILLS, f"only {kills} kills landed in the search: give it more trials"

    last = fork_gemkd([*argv, "run"], tmp_path / "last")
    assert last.wait(timeout=600) == 0, last.output()[-3000:]  # a dead lock would hang here
    assert "taking longer" not in last.output()
    pd.testing.assert_frame_equal(results(Path("run")), results(Path("reference")),
                                  check_exact=True)
    pd.testing.assert_frame_equal(pd.read_csv("run/tuning.csv"),
                                  pd.read_csv("reference/tuning.csv"), check_exact=True)

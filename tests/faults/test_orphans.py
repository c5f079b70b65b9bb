"""``gemkd run`` killed by SIGKILL leaves no process behind: its workers, the multiprocessing
fork server and resource tracker (``--workers 2``), or the local Ray instance it started
(``--executor ray``) end within 30 s, in every phase (the worlds' steps on the workers, tuning,
the final student runs). Before, the workers waited for work forever (and kept the fork server
and the tracker alive with them), ~1.5 GB re-parented to init.

The command is a fresh interpreter in a session of its own, as a user's is; a student run that
should be in progress when the kill comes is the ``Hangs`` method of test_term_workers (it spins
inside its first training step while the file ``hang`` exists)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gemkd.experiments.run.executors import die_with
from gemkd.transfer.process_reaper import reap_on_death
from tests.faults.conftest import ROOT, SPEC
from tests.faults.test_term_workers import HANGS

GRACE = 30.0  # seconds the survivors get to end after the kill


def _ppids() -> dict[int, int]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                out[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return out


def _descendants(pid: int) -> dict[int, tuple[int, str]]:
    """Every descendant of ``pid``: its parent and command line."""
    parents = _ppids()
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found.update({c: (p, _cmdline(c)) for c in kids})
        todo += kids
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:150]
    except OSError:
        return "?"


def _survivors(pids: set[int], seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (alive := sorted(p for p in pids if _running(p))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{p} {_cmdline(p)}" for p in alive]


Seen = dict[int, tuple[int, str]]  # pid: (parent pid, command line), as last seen running


def kill_and_check(tmp_path: Path, spec: dict, ready: Callable[[Path, Seen], bool],
                   *extra: str) -> Seen:
    """Start ``gemkd run`` on ``spec`` (--workers 2 and ``extra``), wait until
    ``ready(out, descendants)``, SIGKILL the command and fail naming any descendant still
    running ``GRACE`` s later (every descendant is killed then, for the next test). The
    descendants seen before the kill."""
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), str(ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "gemkd.experiments.cli", "run", "spec.yaml", "--out", "out",
            "--threads", "1", "--workers", "2", "--pack-size", "1", *extra]
    with open(tmp_path / "command.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=log,
                                start_new_session=True)
    seen: Seen = {}
    try:
        deadline = time.monotonic() + 900  # bounds a hang; the phases come in ~1 min here
        while not ready(tmp_path / "out", seen):
            seen.update(_descendants(proc.pid))
            assert proc.poll() is None, (tmp_path / "command.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "command.log").read_text()[-3000:]
            time.sleep(0.05)
        seen.update(_descendants(proc.pid))
        proc.kill()
        proc.wait()
        left = _survivors(set(seen), GRACE)
        assert not left, f"alive {GRACE:.0f} s after the command's SIGKILL:\n" + "\n".join(left)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        for p in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    return seen


def _workers(seen: Seen) -> list[int]:
    """The pool's workers among ``seen``: the fork server's children."""
    servers = {p for p, (_, cmd) in seen.items() if "multiprocessing.forkserver" in cmd}
    return [p for p, (parent, _) in seen.items() if parent in servers]


def _busy(where: Path, n: int) -> Callable[[Path, Seen], bool]:
    """Ready once ``n`` student runs are inside a training step (``busy-<pid>`` files)."""
    return lambda out, seen: len(list(where.glob("busy-*"))) >= n


@pytest.fixture
def hangs(tmp_path, monkeypatch) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "hanging_method.py").write_text(HANGS)
    monkeypatch.setenv("GEMKD_TEST_DIR", str(tmp_path))
    (tmp_path / "hang").touch()
    return tmp_path


def _spec(tuned: bool) -> dict:
    """Two seeds of the hanging KD variant; ``tuned``: a kd_weight range (the first student
    runs are tuning trials), else one point (no tuning run: the first are the final runs)."""
    tuning = ({"trials": 3, "knobs": {"kd_weight": {"low": 0.1, "high": 10.0, "log": True}}}
              if tuned else {"knobs": {"kd_weight": [1.0]}})
    return {**SPEC, "seeds": [0, 1], "variants": {"hangs": ["hanging_method.Hangs"]},
            "tuning": {**SPEC["tuning"], **tuning,
                       "knobs": {**SPEC["tuning"].get("knobs", {}), **tuning["knobs"]}}}


def test_a_process_dies_with_the_one_it_watches(tmp_path):
    """die_with, the workers' end: a grandchild watching its grandparent (the command; its
    parent is the fork server, which lives on) ends once the grandparent is killed."""
    ready = tmp_path / "ready"
    command = os.fork()
    if command == 0:
        try:
            if os.fork() == 0:
                die_with(os.getppid())
                (tmp_path / "grandchild").write_text(str(os.getpid()))
                os.replace(tmp_path / "grandchild", ready)
                time.sleep(600)
            time.sleep(600)
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline, "the grandchild never started watching"
            time.sleep(0.01)
        grandchild = int(ready.read_text())
        assert _running(grandchild)
    finally:
        os.kill(command, signal.SIGKILL)
        os.waitpid(command, 0)
    try:
        assert not _survivors({grandchild}, 10), "the grandchild outlived the command"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


def test_the_reaper_ends_what_outlives_its_process(tmp_path):
    """reap_on_death, for what ``ray.init`` starts: a descendant in a session of its own,
    which nothing else ends, is ended once the process that started the watchdog is killed."""
    pids = tmp_path / "pids"
    driver = os.fork()
    if driver == 0:
        try:
            watchdog = reap_on_death()
            assert watchdog is not None
            orphan = subprocess.Popen(["sleep", "600"], start_new_session=True)
            time.sleep(2.5)  # the watchdog notes the descendants every second
            pids.write_text(f"{orphan.pid} {watchdog.pid}")
            time.sleep(600)
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 60
        while not pids.exists():
            assert time.monotonic() < deadline, "the driver never started its orphan"
            time.sleep(0.05)
        orphan, watchdog = map(int, pids.read_text().split())
        assert _running(orphan) and _running(watchdog)
    finally:
        os.kill(driver, signal.SIGKILL)
        os.waitpid(driver, 0)
    try:
        assert not _survivors({orphan, watchdog}, 15), "alive after the driver was killed"
    finally:
        for p in (orphan, watchdog):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow  # a run of two worlds whose steps run on two workers: ~1 min
def test_sigkill_in_the_worlds_steps_leaves_nothing(tmp_path):
    spec = {**SPEC, "data": {**SPEC["data"], "seeds": [0, 1]},
            "teacher": {**SPEC["teacher"], "overrides": {**SPEC["teacher"].get("overrides", {}),
                                                         "max_steps": 2000}}}
    logs = tmp_path / "out" / "logs"

    def ready(out: Path, seen: Seen) -> bool:  # both workers inside a world's teacher fit
        return len(_workers(seen)) >= 2 and all(
            "teacher" in (logs / f"prepare_world{w}.txt").read_text()
            for w in (0, 1) if (logs / f"prepare_world{w}.txt").exists()) and len(
            list(logs.glob("prepare_world*.txt"))) == 2

    seen = kill_and_check(tmp_path, spec, ready)
    assert len(_workers(seen)) >= 2


@pytest.mark.slow  # a teacher, a store, then two workers start: ~1 min
@pytest.mark.parametrize("tuned", [True, False], ids=["tuning", "final-runs"])
def test_sigkill_during_student_runs_leaves_nothing(hangs, tuned):
    seen = kill_and_check(hangs, _spec(tuned), _busy(hangs, 2))
    assert len(_workers(seen)) == 2  # the pool was there to be left behind
    keys = (hangs / "out" / "runs.jsonl")
    assert not keys.exists() or not keys.read_text().strip()  # the runs were in progress


@pytest.mark.slow  # Ray starts a local instance: ~1.5 min
def test_sigkill_with_the_ray_executor_leaves_nothing(hangs):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'gemkd[ray]')")
    seen = kill_and_check(hangs, _spec(False), _busy(hangs, 1), "--executor", "ray")
    assert any("raylet" in cmd or "gcs_server" in cmd for _, cmd in seen.values())

"""SIGTERM and ``gemkd run --workers 2``: ``kill PID`` of the command stops every worker and
exits 143 with the run resumable; SIGTERM sent to one worker ends that worker (its run is
retried on a fresh one). Trap 8 of the second real log: the command died and its two workers
went on training, orphaned, for 15+ minutes; a worker ignored SIGTERM (its job caught it)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.conftest import SPEC, gemkd_run
from tests.faults.forked import Child, fork_gemkd

# a KD method that, while HANG exists, stops inside its first training step (in Lightning, as a
# student run's work is) after writing busy-<pid>
HANGS = '''
import os
import time
from pathlib import Path

from gemkd.transfer.methods import KD


class Hangs(KD):
    def loss(self, step, out):
        where = Path(os.environ["GEMKD_TEST_DIR"])
        if (where / "hang").exists():
            (where / f"busy-{os.getpid()}").touch()
            while True:
                time.sleep(0.05)
        return super().loss(step, out)
'''


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has stopped: it counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _busy_pids(where: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in where.glob("busy-*"))


def _busy(child: Child, where: Path, n: int) -> list[int]:
    """The pids of ``n`` workers once each has written ``busy-<pid>`` (inside a student run's
    training step): the run's own signal, waited for while the command lives. The time-out
    only bounds a hang; the command's data, teacher and store steps come first (~40 s alone
    here, minutes on a loaded machine). On a failure the busy workers are killed too: they
    would spin in ``Hangs`` for the rest of the session."""
    try:
        child.wait_until(lambda: len(_busy_pids(where)) >= n,
                         f"{n} workers busy (busy-<pid> files in {where})", timeout=900)
    except BaseException:
        for pid in _busy_pids(where):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
    return _busy_pids(where)


@pytest.fixture
def spec(tmp_path, monkeypatch) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "hanging_method.py").write_text(HANGS)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'pkg'}{os.pathsep}"
                                     f"{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setenv("GEMKD_TEST_DIR", str(tmp_path))
    (tmp_path / "hang").touch()
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "seeds": [0, 1], "variants": {
        "hangs": ["hanging_method.Hangs"]}}))
    return path


def _argv(spec: Path, out: Path) -> list[str]:
    return ["run", str(spec), "--out", str(out), "--threads", "1", "--workers", "2",
            "--pack-size", "1"]


@pytest.mark.slow  # two worker processes start on the shared cores: ~40 s
def test_sigterm_stops_every_worker_and_exits_143_resumable(spec, tmp_path, capsys):
    out = tmp_path / "run"
    child = fork_gemkd(_argv(spec, out), tmp_path / "child")
    workers = _busy(child, tmp_path, 2)  # both workers inside a student run's training step
    os.kill(child.pid, signal.SIGTERM)
    assert child.wait() == 143, child.output()[-3000:]
    assert "Traceback" not in child.output(), child.output()[-3000:]
    deadline = time.monotonic() + 10
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in workers if _alive(p)], "workers left running after the command"
    assert (out / "log.txt").read_text().rstrip().endswith("rerun the same command to resume")

    (tmp_path / "hang").unlink()
    capsys.readouterr()
    assert gemkd_run(spec, out) == 0  # the same run resumes: the cached steps are reused
    log = capsys.readouterr().out
    assert "[cached] teacher (" in log and "[cached] store (" in log
    assert (out / "results.csv").is_file()


@pytest.mark.slow  # ~40 s, as above
def test_sigterm_to_a_worker_ends_it(spec, tmp_path):
    out = tmp_path / "run"
    child = fork_gemkd(_argv(spec, out), tmp_path / "child")
    victim, _ = _busy(child, tmp_path, 2)
    (tmp_path / "hang").unlink()  # the runs retried on a fresh pool (and the other) go on
    for p in tmp_path.glob("busy-*"):
        p.unlink()
    os.kill(victim, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _alive(victim) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(victim), "a worker ignored SIGTERM"
    # the broken pool's other worker is stopped by the pool; both runs go to a fresh one
    assert child.wait() == 0, child.output()[-3000:]
    assert (out / "results.csv").is_file()

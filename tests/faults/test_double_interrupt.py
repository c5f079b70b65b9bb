"""Ctrl-C twice: the second signal, while the command unwinds, raises nothing and hurries the
stop (the workers are killed at once instead of given a minute to save a checkpoint); the
command prints its one ``interrupted:`` line, no traceback, and exits 130. Before, the second
KeyboardInterrupt cut the workers' stop short and ended in a traceback from an exit handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gemkd.experiments.cli import interrupt
from gemkd.experiments.run import executors
from tests.faults.conftest import ROOT, SPEC
from tests.faults.test_orphans import _descendants, _running, _survivors

# a KD method that, while HANG exists, spins inside its first training step after writing
# busy-<pid>, and ignores SIGTERM there: a worker slow to stop (as one saving a checkpoint is)
STUBBORN = '''
import os
import signal
import time
from pathlib import Path

from gemkd.transfer.methods import KD


class Stubborn(KD):
    def loss(self, step, out):
        where = Path(os.environ["GEMKD_TEST_DIR"])
        if (where / "hang").exists():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            (where / f"busy-{os.getpid()}").touch()
            while True:
                time.sleep(0.05)
        return super().loss(step, out)
'''


def test_the_second_signal_hurries_the_third_raises():
    with interrupt.handled():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert not executors.HURRY.is_set()
        os.kill(os.getpid(), signal.SIGINT)  # unwinding: nothing raised
        deadline = time.monotonic() + 5
        while not executors.HURRY.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert executors.HURRY.is_set()
        with pytest.raises(KeyboardInterrupt):  # a third: for code that swallowed the first
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert interrupt.exit_code() == 130
    with interrupt.handled():  # the next command starts afresh
        assert not executors.HURRY.is_set()


@pytest.mark.slow  # a teacher, a store, two workers: ~1 min
def test_ctrl_c_twice_stops_at_once_without_a_traceback(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "stubborn_method.py").write_text(STUBBORN)
    (tmp_path / "hang").touch()
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(
        {**SPEC, "seeds": [0, 1], "variants": {"stubborn": ["stubborn_method.Stubborn"]}}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GEMKD_TEST_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), str(ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "gemkd.experiments.cli", "run", "spec.yaml", "--out", "out",
            "--threads", "1", "--workers", "2", "--pack-size", "1"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    seen: dict = {}
    try:
        deadline = time.monotonic() + 900
        while len(list(tmp_path.glob("busy-*"))) < 2:
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "the workers never got busy"
            time.sleep(0.1)
        seen = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's whole group
        time.sleep(2.0)
        assert proc.poll() is None  # still waiting for its workers, which ignore SIGTERM
        stopped = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in seen:
            if _running(p):
                os.kill(p, signal.SIGKILL)
    stderr = err.decode()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith("interrupted")] == [
        interrupt.RUN_MESSAGE]
    assert took < executors.STOP_SECONDS / 2, took  # not the minute a first Ctrl-C allows
    assert not _survivors(set(seen), 30)
    log = (tmp_path / "out" / "log.txt").read_text()
    assert log.rstrip().endswith(interrupt.RUN_MESSAGE)
    assert Path(tmp_path / "out").is_dir()

"""``gemkd teacher export`` killed by SIGKILL part-way: the store path is complete or absent,
never a store that loads with missing rows; the rerun writes the store an uninterrupted export
writes (same shards, byte for byte)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemkd.experiments.cli import main
from gemkd.transfer.errors import StoreError
from gemkd.transfer.store import TeacherStore
from tests.faults.conftest import ROOT, assert_same_store, cli_error, export_argv
from tests.faults.forked import fork_gemkd


def assert_absent(store: Path) -> None:
    """Nothing at the store path; at most the killed export's hidden staging directory."""
    assert not store.exists()
    with pytest.raises(StoreError, match="no such store directory"):
        TeacherStore(store)
    hidden = [p.name for p in store.parent.iterdir() if p.name.startswith(f".{store.name}")]
    assert all(name.startswith(f".{store.name}.tmp-") for name in hidden), hidden


@pytest.mark.parametrize("point", ["export.predicting", "export.closed", "export.manifest",
                                   "export.finalized"])
def test_sigkill_mid_export_then_rerun(tiny_run, tmp_path, capsys, point):
    store = tmp_path / "store"
    child = fork_gemkd(export_argv(tiny_run, store), tmp_path / "child", pause=point)
    child.wait_paused()
    child.kill()
    if point == "export.finalized":  # killed after the rename: the store is whole
        assert_same_store(store, tiny_run.store)
        err = cli_error(capsys, *export_argv(tiny_run, store))
        assert f"{store}: already exists" in err  # a rerun never clobbers it silently
        assert main(export_argv(tiny_run, store, "--overwrite")) == 0
    else:
        assert_absent(store)
        assert main(export_argv(tiny_run, store)) == 0
    assert_same_store(store, tiny_run.store)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2, 0.5])
def test_sigkill_real_cli_at_a_random_moment(tiny_run, tmp_path, delay):
    """No pause hooks: a ``python -m gemkd.experiments.cli`` export killed ``delay`` s after its
    staging directory appeared (wherever it then is), then rerun."""
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "gemkd.experiments.cli",
                             *export_argv(tiny_run, store)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while (not any(tmp_path.glob(".store.tmp-*")) and proc.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.005)
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    if store.exists():  # the export got through its rename before the kill
        assert_same_store(store, tiny_run.store)
        return
    assert_absent(store)
    assert main(export_argv(tiny_run, store)) == 0
    assert_same_store(store, tiny_run.store)

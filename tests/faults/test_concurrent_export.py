"""Two exports into one store path at once leave one complete store, never a mix: without
``--overwrite`` one succeeds and the other fails with a clear error (exit 2); with it both
succeed and the last one's store stands whole. Every row is in the final store exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gemkd.transfer.errors import GemkdError
from gemkd.transfer.store import StoreWriter, TeacherStore
from tests.faults.conftest import ROOT, assert_same_store, error_line, export_argv
from tests.faults.forked import fork_gemkd
from tests.transfer.store.helpers import feed, make_rows, writer_args


def no_leftovers(store: Path) -> None:
    assert [p.name for p in store.parent.iterdir() if p.name.startswith(f".{store.name}")] == []


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_two_cli_exports_race_for_one_store(tiny_run, tmp_path, overwrite):
    """Both exports pass their start-up check (the store is absent), then commit together."""
    store = tmp_path / "store"
    argv = export_argv(tiny_run, store, *(["--overwrite"] if overwrite else []))
    barrier = (tmp_path / "barrier", 2)
    barrier[0].mkdir()
    children = [fork_gemkd(argv, tmp_path / f"child{i}", barrier=barrier) for i in range(2)]
    codes = sorted(c.wait() for c in children)
    if overwrite:
        assert codes == [0, 0], [c.output()[-2000:] for c in children]
    else:
        assert codes == [0, 2], [c.output()[-2000:] for c in children]
        (loser,) = [c for c in children if c.returncode == 2]
        assert error_line(loser.output()) == (
            f"error: {store}: already exists (written by another process while this one ran); "
            "choose a new path or pass --overwrite")
    assert_same_store(store, tiny_run.store)
    no_leftovers(store)


def test_store_writers_never_mix(tmp_path):
    """The StoreWriter path with different rows per writer, so a mix would show: the first to
    finalize wins; with overwrite, the last one does; either way its rows alone, each once."""
    a, b = make_rows(90, seed=1), make_rows(70, seed=2, first_id=1_000_000)
    for overwrite in (False, True):
        target = tmp_path / f"store-{overwrite}"
        wa = StoreWriter(target, **writer_args(overwrite=overwrite))
        wb = StoreWriter(target, **writer_args(overwrite=overwrite))
        assert wa.staging_dir != wb.staging_dir  # each writer stages in its own directory
        feed(wa, a)
        feed(wb, b)
        wa.finalize()
        if overwrite:
            wb.finalize()
        else:
            with pytest.raises(GemkdError, match=f"{target}: already exists"):
                wb.finalize()
            assert wb.state == "aborted"
        want = b if overwrite else a
        ids = TeacherStore(target).read(columns=["example_id"]).column(0).to_numpy()
        np.testing.assert_array_equal(np.sort(ids), np.sort(want["example_id"]))
        no_leftovers(target)


@pytest.mark.slow
def test_two_real_cli_exports_at_once(tiny_run, tmp_path):
    """No hooks: two ``python -m gemkd.experiments.cli`` exports started together."""
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "gemkd.experiments.cli",
                               *export_argv(tiny_run, store)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert sorted(p.returncode for p in procs) == [0, 2], [e[-2000:] for e in errs]
    (err,) = [e for p, e in zip(procs, errs, strict=True) if p.returncode == 2]
    assert error_line(err).startswith(f"error: {store}: already exists")
    assert_same_store(store, tiny_run.store)
    no_leftovers(store)

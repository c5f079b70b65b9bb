"""A full disk (ENOSPC) during ``gemkd data import`` or ``gemkd run``: one ``error:`` line naming
the path, exit code 2, no half-written output: an import leaves no dataset and no staging; a
run directory this run created with no finished work in it is removed, one holding finished
work is kept whole for the rerun. Before, each was an ``OSError: [Errno 28]`` traceback with
exit code 1, and a run directory was left behind.

The fault is injected where it runs anywhere (a write that raises ENOSPC, as the kernel's
does); a real full disk (a 256 kB tmpfs) is tried too where this process may mount one."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gemkd.experiments.cli import main
from gemkd.transfer.data.importer import stream
from tests.faults.conftest import error_line, snapshot
from tests.faults.test_first_use import import_spec, single_domain_log

FULL = os.strerror(errno.ENOSPC)


def full_when_writing(monkeypatch, pattern: str) -> list[str]:
    """Make ``os.fsync`` of a file whose name matches ``pattern`` fail as on a full disk (a
    delayed allocation's error surfaces there); the names it failed, in order."""
    real, failed = os.fsync, []

    def fsync(fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if fnmatch.fnmatch(name, pattern):
            failed.append(name)
            raise OSError(errno.ENOSPC, FULL)
        real(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd to name a descriptor's file")
    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def _error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    return error_line(err)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("disk-full-log")
    single_domain_log(folder, n=20000)
    return folder


def test_import_on_a_full_disk(log_dir, tmp_path, capsys, monkeypatch):
    real, calls = stream._gather, []

    def gather(*args, **kwargs):  # the second batch's spill finds the disk full
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, FULL)
        return real(*args, **kwargs)

    monkeypatch.setattr(stream, "_gather", gather)
    out = tmp_path / "data"
    line = _error(capsys, ["data", "import", "--src", str(log_dir / "log.csv"), "--mapping",
                           str(log_dir / "mapping.yaml"), "--out", str(out),
                           "--batch-rows", "5000"])
    assert line == (f"error: {out}: no space left on device while writing it; free some space "
                    "there (or write elsewhere) and rerun")
    assert len(calls) == 2
    assert list(tmp_path.iterdir()) == []  # no dataset, no staging, no lock


def test_a_run_that_finished_nothing_leaves_no_directory(tiny_run, tmp_path, capsys,
                                                         monkeypatch):
    failed = full_when_writing(monkeypatch, ".environment.json.tmp-*")
    out = tmp_path / "run"
    line = _error(capsys, ["run", str(tiny_run.spec), "--out", str(out), "--threads", "1"])
    assert line.startswith(f"error: {out}: no space left on device"), line
    assert failed and not out.exists()


def test_a_run_with_finished_work_keeps_it(tiny_run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(tiny_run.out, out)
    (out / "results.csv").unlink()
    before = snapshot(out)
    failed = full_when_writing(monkeypatch, ".results.csv.tmp-*")
    line = _error(capsys, ["run", str(tiny_run.spec), "--out", str(out), "--threads", "1"])
    assert line.startswith(f"error: {out}: no space left on device"), line
    assert failed and snapshot(out) == before  # every finished step and run kept, no results
    assert not list(out.glob(".results.csv.tmp-*"))
    assert (out / "log.txt").read_text().rstrip().endswith(line.removeprefix("error: "))


@contextlib.contextmanager
def tiny_disk(where: Path, size: str = "256k"):
    """A tmpfs of ``size`` mounted at ``where`` for the block (skips where mounting is not
    permitted: not root, or a container without the capability)."""
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk(log_dir, tmp_path, capsys):
    spec = import_spec(log_dir)
    with tiny_disk(tmp_path / "disk") as disk:
        line = _error(capsys, ["data", "import", "--src", str(log_dir / "log.csv"), "--mapping",
                               str(log_dir / "mapping.yaml"), "--out", str(disk / "data")])
        assert line.startswith(f"error: {disk / 'data'}: no space left on device"), line
        assert list(disk.iterdir()) == []
        line = _error(capsys, ["run", str(spec), "--out", str(disk / "run"), "--threads", "1"])
        assert ": no space left on device while writing it" in line, line
        assert str(disk / "run") in line
        assert list(disk.iterdir()) == []

"""Two ``gemkd run`` on one run directory at once: the second is refused with one error line
naming the process that holds it (pid, host), trains nothing and records nothing; once the
holder is gone (even killed), the directory is free again."""

from __future__ import annotations

import json
import socket

from tests.faults.conftest import cli_error, gemkd_run
from tests.faults.forked import fork_gemkd


def test_second_run_on_a_busy_run_dir_is_refused(tiny_run, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", str(tiny_run.spec), "--out", str(out), "--threads", "1"]
    child = fork_gemkd(argv, tmp_path / "child", pause="run.first_student")
    try:
        child.wait_paused()  # holds the run directory, one student run recorded
        ledger = (out / "runs.jsonl").read_text()
        err = cli_error(capsys, *argv)
        assert err.startswith(f"error: {out}: in use by pid {child.pid} on host "
                              f"{socket.gethostname()} since "), err
        assert (out / "runs.jsonl").read_text() == ledger  # nothing trained, nothing appended
    finally:
        child.kill()
    assert gemkd_run(tiny_run.spec, out) == 0  # the kernel dropped the dead holder's lock
    keys = [json.loads(line)["key"] for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 2

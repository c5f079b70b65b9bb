"""``gemkd run`` killed by SIGKILL part-way: the rerun reuses every finished step, says so in its
log, and ends with the results of an uninterrupted run on the same seeds."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.faults.conftest import gemkd_run, results
from tests.faults.forked import fork_gemkd


@pytest.mark.parametrize("point, finished, redone", [
    # the teacher step finished; killed inside the store export that follows it
    ("export.predicting", ["data", "teacher"], ["[run] store", "baseline        seed 0: NE",
                                                "kd              seed 0: NE"]),
    # every cached step and the baseline student finished; killed before the KD student
    ("run.first_student", ["data", "teacher", "store"],
     ["[cached] baseline seed 0 (runs.jsonl)", "kd              seed 0: NE"]),
], ids=["in-store-export", "after-first-student"])
def test_sigkill_run_then_rerun_matches(tiny_run, tmp_path, capsys, point, finished, redone):
    out = tmp_path / "run"
    child = fork_gemkd(["run", str(tiny_run.spec), "--out", str(out), "--threads", "1"],
                       tmp_path / "child", pause=point)
    child.wait_paused()
    child.kill()
    assert not (out / "results.csv").exists()
    done = sorted(p.parent.name.split("-")[0] for p in out.glob("cache/*/DONE"))
    assert done == sorted(finished)
    if point == "export.predicting":  # the half-made export is not in the cache
        (store_step,) = out.glob("cache/store-*")
        assert not (store_step / "store").exists() and not (out / "runs.jsonl").exists()

    capsys.readouterr()
    assert gemkd_run(tiny_run.spec, out) == 0
    log = capsys.readouterr().out
    for step in finished:
        assert f"[cached] {step} (" in log and f"[run] {step} (" not in log
    for line in redone:
        assert line in log
    if point == "run.first_student":
        assert "baseline        seed 0: NE" not in log  # reused, not retrained

    pd.testing.assert_frame_equal(results(out), results(tiny_run.out), check_exact=True)
    keys = [json.loads(line)["key"] for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(set(keys)) == len(keys)  # each student run recorded once: none redone
    assert sorted(k.split("|")[:4] for k in keys) == [["final", "baseline", "0", "0"],
                                                      ["final", "kd", "0", "0"]]

"""A run's numbers depend on torch's thread count (its CPU sums do), so the thread count is part
of what a cached step and a student run are keyed by, and a student run uses the same count
wherever it runs (this process or a worker)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gemkd.experiments.run import executors
from gemkd.experiments.run.cache import config_hash, step_key
from gemkd.experiments.run.executors import LocalProcesses, Serial, make_executor
from gemkd.experiments.run.inputs import inputs_tag
from gemkd.experiments.run.jobs import InputPaths
from gemkd.experiments.spec import load_spec


@pytest.fixture
def threads():
    """Set torch's thread count for the test, restored after it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def test_torch_steps_are_keyed_by_the_thread_count_the_data_step_is_not(threads):
    threads(1)
    one = {name: step_key(name, {"x": 1}) for name in ("data", "teacher", "store", "codes")}
    threads(2)
    two = {name: step_key(name, {"x": 1}) for name in ("data", "teacher", "store", "codes")}
    assert "threads" not in one["data"] and one["data"] == two["data"]
    for name in ("teacher", "store", "codes"):
        assert (one[name]["threads"], two[name]["threads"]) == (1, 2)
        assert config_hash(one[name]) != config_hash(two[name])


def test_the_serial_path_runs_at_its_thread_count_and_restores_the_process(threads,
                                                                           monkeypatch):
    seen = []
    monkeypatch.setattr(executors, "execute", lambda run: seen.append(torch.get_num_threads())
                        or {"run": run})
    threads(2)
    done = []
    Serial(1).run(["a", "b"], lambda run, res: done.append(res["run"]))
    assert seen == [1, 1] and done == ["a", "b"]
    assert torch.get_num_threads() == 2  # the process's own count is back
    assert Serial().threads == 2  # no count given: the process's own


def test_make_executor_gives_every_run_the_same_threads_wherever_it_runs(threads):
    threads(2)
    serial = make_executor(workers=1)  # no --threads: 1, as the workers get
    assert isinstance(serial, Serial) and serial.threads == 1
    assert make_executor(workers=1, threads=2).threads == 2
    pool = make_executor(workers=2)
    try:
        assert isinstance(pool, LocalProcesses) and pool.threads == 1
    finally:
        pool.close()


def test_the_student_runs_tag_carries_their_thread_count():
    spec = load_spec(None, [])
    inputs = InputPaths({"gem": Path("/cache/store-abc/store")}, Path("/cache/codes-def/codes"))
    assert inputs_tag(spec, inputs, 1) == inputs_tag(spec, inputs, 1)
    assert inputs_tag(spec, inputs, 1) != inputs_tag(spec, inputs, 2)

"""The spec is pure data: no property or method of ``RunSpec`` reads a file. What depends on
the teacher config (a file) — the held-out validation days, each lag's teacher days — is the
run's plan (``gemkd.experiments.run.preflight.plan_run``), built once before any work."""

from __future__ import annotations

import builtins
import inspect
import io
import os
import pathlib
from contextlib import contextmanager
from pathlib import Path

import pytest

from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.spec import RunSpec, load_spec, spec_from_mapping

ROOT = Path(__file__).resolve().parents[3]

#: an argument for each parameter name a RunSpec method takes (a new parameter fails the test
#: below until it is named here, so every method is called)
ARGS = {"lag": 0, "name": "kd"}


class FileRead(AssertionError):
    pass


@contextmanager
def no_files(monkeypatch: pytest.MonkeyPatch):
    """Every way the spec's code could reach a file raises :class:`FileRead`."""
    def refuse(*args, **kwargs):
        raise FileRead(f"a file was read: {args[:1]}")

    with monkeypatch.context() as m:
        for owner, name in [(builtins, "open"), (io, "open"), (os, "open"), (os, "stat"),
                            (os, "scandir"), (os, "listdir"),
                            (pathlib.Path, "open"), (pathlib.Path, "read_text"),
                            (pathlib.Path, "read_bytes"), (pathlib.Path, "is_file"),
                            (pathlib.Path, "exists"), (pathlib.Path, "glob")]:
            m.setattr(owner, name, refuse)
        yield


def _members() -> list[tuple[str, object]]:
    return [(name, member) for name, member in inspect.getmembers(RunSpec)
            if not name.startswith("_") and (isinstance(member, property)
                                             or inspect.isfunction(member))]


def _use(spec: RunSpec, name: str, member: object) -> object:
    if isinstance(member, property):
        return getattr(spec, name)
    params = list(inspect.signature(member).parameters)[1:]  # type: ignore[arg-type]
    missing = [p for p in params if p not in ARGS]
    assert not missing, f"RunSpec.{name}: name an argument for {missing} in ARGS"
    return getattr(spec, name)(*(ARGS[p] for p in params))


@pytest.mark.parametrize("keys", [
    {},  # small: 2 epochs, so a held-out day depends on the config file
    {"teacher_protocol": "streaming", "teacher_lag_days": [0, 1]},
    {"teacher": {"config": "tiny", "overrides": {"max_epochs": 3}}, "teacher_window_days": 4},
])
def test_no_property_or_method_of_the_spec_reads_a_file(monkeypatch, keys):
    spec = spec_from_mapping({"variants": ["baseline", "kd"], **keys})
    members = _members()
    assert {"teacher_window", "lags", "worlds", "to_dict", "variant"} <= {n for n, _ in members}
    with no_files(monkeypatch):
        for name, member in members:
            _use(spec, name, member)


def test_the_guard_catches_a_file_read(monkeypatch):
    """The check above can fail: the plan, which reads the teacher config, trips it."""
    spec = spec_from_mapping({"variants": ["baseline", "kd"]})
    with no_files(monkeypatch), pytest.raises(FileRead):
        plan_run(spec)


def test_the_plan_holds_out_a_day_for_a_config_of_several_epochs():
    spec = load_spec(ROOT / "experiments" / "quickstart.yaml")
    plan = plan_run(spec)
    epochs = plan.teachers[0].max_epochs
    assert plan.val_days == (1 if epochs > 1 else 0)
    first, end = spec.teacher_window(0)
    assert plan.seen == {0: (first, end - plan.val_days)}
    assert plan.teachers[0].train_days == [first, end - plan.val_days]

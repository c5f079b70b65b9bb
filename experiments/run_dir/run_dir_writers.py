"""Writing a run directory (:class:`~gemkd.experiments.run_dir.RunDir`'s writers, the runner's):
every writer replaces its file whole, atomically (a temporary name, then a rename: a reader
never sees a torn file), except the ledger's and the log's lines, which are appended."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from gemkd.experiments.run_dir.run_dir_layout import (
    LAYOUT_VERSION,
    RunDirLayout,
    read_layout_version,
)
from gemkd.experiments.run_dir.run_dir_readers import ledger_check
from gemkd.transfer.io.atomic import atomic_write_bytes


class RunDirWriters(RunDirLayout):
    """The writers of :class:`~gemkd.experiments.run_dir.RunDir`."""

    def write_layout(self) -> None:
        """Record :data:`LAYOUT_VERSION` in ``run.json`` (the runner, before any other file);
        a run directory of a newer layout is refused rather than mixed with this one."""
        self.layout_version = read_layout_version(self.path)
        self._write(self.RUN_JSON, json.dumps({"layout_version": LAYOUT_VERSION}) + "\n")
        self.layout_version = LAYOUT_VERSION

    def write_spec(self, spec: Mapping[str, Any]) -> None:
        """``spec.yaml``: the spec as run (``RunSpec.to_dict()``), in its own key order."""
        self._write(self.SPEC, yaml.safe_dump(dict(spec), sort_keys=False))

    def write_environment(self, environment: Mapping[str, Any]) -> None:
        """``environment.json``: versions and torch thread counts."""
        self._write(self.ENVIRONMENT, json.dumps(dict(environment), indent=2))

    def write_command(self, argv: Sequence[str]) -> None:
        """``command.txt``: the command line, one line."""
        self._write(self.COMMAND, " ".join(argv) + "\n")

    def write_results(self, results: pd.DataFrame) -> None:
        """``results.csv`` (written last: a reader takes it as the run's end)."""
        self._write(self.RESULTS, results.to_csv(index=False))

    def write_tuning(self, tuning: pd.DataFrame) -> None:
        """``tuning.csv``: every search trial, one row per knob."""
        self._write(self.TUNING, tuning.to_csv(index=False))

    def write_phases(self, phases: Mapping[str, float]) -> None:
        """``phases.json``: wall seconds per phase, to a tenth."""
        self._write(self.PHASES, json.dumps({k: round(v, 1) for k, v in phases.items()},
                                            indent=2) + "\n")

    def write_sampled_negatives(self, negatives: Mapping[str, Any]) -> None:
        """``sampled_negatives.json``: how a positive-only log's negatives were drawn."""
        self._write(self.NEGATIVES, json.dumps(negatives, indent=2))

    def record_teacher_data(self, world: int | None, lag: int | float,
                            entry: dict[str, Any]) -> None:
        """Add the (world, lag) entry to ``teacher_data.json`` (the file rewritten whole)."""
        self._record(self.TEACHER_DATA, world, lag, entry)

    def record_teacher_fit(self, world: int | None, lag: int | float,
                           entry: dict[str, Any]) -> None:
        """Add the (world, lag) entry to ``teacher_fit.json`` (the file rewritten whole)."""
        self._record(self.TEACHER_FIT, world, lag, entry)

    def append_ledger(self, key: str, record: dict[str, Any]) -> dict[str, Any]:
        """Add a finished student run to ``runs.jsonl``: one line, its ``check`` last
        (:func:`~gemkd.experiments.run_dir.run_dir_readers.ledger_check`), written by one ``write``
        to the end of the file. A line torn by a kill is never read as a record
        (:meth:`ledger` leaves it out and that run is redone); a torn tail is cut off before
        the next line is appended, so the new line is not glued to it. Returns ``record``."""
        line = json.dumps({"key": key, **record})
        data = (line[:-1] + f', "check": "{ledger_check(line)}"}}\n').encode()
        fd = os.open(self.ledger_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _cut_torn_tail(fd)
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        return record

    def remove_students(self, paths: Sequence[Path]) -> None:
        """Drop kept students the spec's ``keep_students`` does not keep (the median policy,
        once every seed of a variant has finished)."""
        for p in paths:
            if p.parent.parent.parent != self.students_dir:
                raise ValueError(f"{p}: not a kept student of {self.path}")
            p.unlink(missing_ok=True)

    def _record(self, name: str, world: int | None, lag: int | float,
                entry: dict[str, Any]) -> None:
        table = self._json(name) or {}
        table.setdefault(str(world if world is not None else 0), {})[str(lag)] = entry
        self._write(name, json.dumps(table, indent=2))

    def _write(self, name: str, text: str) -> None:
        atomic_write_bytes(self.path / name, text.encode())


def _cut_torn_tail(fd: int) -> None:
    """Truncate a file that does not end with a line end to its last line end (what a kill
    in the middle of an append leaves: a part of a line)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    keep, step = 0, 1 << 16
    for end in range(size, 0, -step):
        chunk = os.pread(fd, min(step, end), max(0, end - step))
        at = chunk.rfind(b"\n")
        if at >= 0:
            keep = max(0, end - step) + at + 1
            break
    os.ftruncate(fd, keep)
def write_student_file(path: str | Path, payload: Mapping[str, Any]) -> None:
    """Write a kept student (``RunDirLayout.student_path``; tensors, numbers, strings, lists
    and dicts, loadable with ``torch.load(weights_only=True)``) atomically. A worker process
    writes it, as it writes its run's per-user sums, so it is a function of the path."""
    import torch

    buf = io.BytesIO()
    torch.save(dict(payload), buf)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())

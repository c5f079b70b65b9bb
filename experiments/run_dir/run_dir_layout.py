"""A run directory's layout: its file names, the paths built from them and the layout version
(the part of :class:`~gemkd.experiments.run_dir.RunDir` that its readers and writers share;
the layout itself is listed in :mod:`gemkd.experiments.run_dir`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gemkd.transfer.errors import ConfigError

#: The layout this gemkd writes and the newest it reads; bump it when a file moves or changes
#: meaning, and teach :class:`RunDir` to read the older ones.
LAYOUT_VERSION = 1


class RunDirLayout:
    """The file names of a run directory and their paths; constructing it checks the layout
    version (a newer one is a ConfigError saying which gemkd to use)."""

    RUN_JSON = "run.json"
    SPEC = "spec.yaml"
    ENVIRONMENT = "environment.json"
    COMMAND = "command.txt"
    LOG = "log.txt"
    PHASES = "phases.json"
    LEDGER = "runs.jsonl"
    RESULTS = "results.csv"
    TUNING = "tuning.csv"
    TEACHER_DATA = "teacher_data.json"
    TEACHER_FIT = "teacher_fit.json"
    NEGATIVES = "sampled_negatives.json"
    CURVES = "curves"
    CLUSTERS = "clusters"
    STUDENTS = "students"
    CACHE = "cache"
    LOGS = "logs"
    PLOTS = "plots"
    PERTURBED = "perturbed"
    REPORT = "report.md"
    INTERVALS = "intervals.csv"
    LOCK = ".lock"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.layout_version = read_layout_version(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r}, layout_version={self.layout_version})"

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # ---- paths ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.resolve().name

    @property
    def cache(self) -> Path:
        return self.path / self.CACHE

    @property
    def clusters_dir(self) -> Path:
        return self.path / self.CLUSTERS

    @property
    def logs_dir(self) -> Path:
        """Where a tracker's files and the workers' per-world lines go."""
        return self.path / self.LOGS

    @property
    def lock_path(self) -> Path:
        """The lock the run that owns the directory holds."""
        return self.path / self.LOCK

    @property
    def log_path(self) -> Path:
        """The run's progress log (appended to by ``run.progress.Progress``)."""
        return self.path / self.LOG

    @property
    def ledger_path(self) -> Path:
        return self.path / self.LEDGER

    @property
    def results_path(self) -> Path:
        return self.path / self.RESULTS

    @property
    def tuning_path(self) -> Path:
        return self.path / self.TUNING

    @property
    def phases_path(self) -> Path:
        return self.path / self.PHASES

    def prepare_log_path(self, world: int | None) -> Path:
        """A worker's lines while it prepares ``world``'s cached steps."""
        return self.logs_dir / f"prepare_world{world}.txt"

    def curve_path(self, variant: str, seed: int, lag: int | float,
                   world: int | None = None) -> Path:
        """A final run's training curve (``world`` only in a run over several worlds)."""
        suffix = f"_w{world}" if world is not None else ""
        return self.path / self.CURVES / f"{variant}_seed{seed}_lag{lag}{suffix}.csv"

    def clusters_path(self, world: int, lag: int | float, name: str) -> Path:
        """Per-user evaluation sums of ``name`` (``<variant>__seed<S>`` or
        ``teacher__<source>``) at one world and lag."""
        return self.clusters_dir / f"world={world}" / f"lag={lag}" / f"{name}.npz"

    @property
    def students_dir(self) -> Path:
        return self.path / self.STUDENTS

    def student_path(self, world: int, lag: int | float, variant: str, seed: int) -> Path:
        """A kept final student (``keep_students``): its evaluated weights and what rebuilds
        it (:mod:`gemkd.experiments.run.kept_students`)."""
        return self.students_dir / f"world={world}" / f"lag={lag}" / f"{variant}__seed{seed}.pt"

    def _json(self, name: str) -> Any:
        path = self.path / name
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as e:
            raise ConfigError(f"{path}: not readable JSON: {e}") from None


def read_layout_version(path: Path) -> int:
    """The layout version of the run directory at ``path``: ``run.json``'s, 1 without one (a
    run before the file existed); an unknown or newer version is a ConfigError."""
    file = path / RunDirLayout.RUN_JSON
    if not file.is_file():
        return 1
    try:
        version = json.loads(file.read_text())["layout_version"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{file}: expected {{\"layout_version\": <int>}}; this file says "
                          "which layout the run directory has") from None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(f"{file}: layout_version {version!r} is not a layout gemkd knows "
                          f"(1 to {LAYOUT_VERSION})")
    if version > LAYOUT_VERSION:
        raise ConfigError(f"{file}: layout_version {version} is newer than this gemkd reads "
                          f"(up to {LAYOUT_VERSION}): the run was written by a newer gemkd; "
                          "read it with that version (pip install -U gemkd)")
    return version

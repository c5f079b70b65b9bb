"""The run directory of a teacher fit: the one place that names its files, reads and writes them.

A fit (``build_trainer`` and ``fit`` of transfer/training, ``fit_teacher`` of experiments)
writes, under ROOT::

    config.yaml          the resolved teacher config, written before training
    metrics.csv          Lightning's CSV log (RunCSVLogger: one row per logged step and per
    hparams.yaml         validation round; a resumed fit appends) and its hyper-parameters
    val_metrics.json     the fit's summary (global step, epochs, kept epoch, final validation)
    checkpoints/
      last.ckpt          the latest state (LatestCheckpoint, TimedCheckpoint, InterruptCheckpoint;
                         under FSDP a sharded directory)
      best.ckpt          the best validation epoch (``select: best``: Lightning's ModelCheckpoint)
      day=N.ckpt         a streaming pass's state after day N (DayCheckpoints)
    logs/                an experiment tracker's files when the fit logs to one by kind

Most of these files are written by the Lightning callbacks of transfer/training, the rest by
experiments (the fit, its export, the run's cache and curve, the report), so the owner sits
below both, in transfer, and no other module spells a name
(``tests/transfer/test_teacher_fit_dir.py`` checks). It imports neither torch nor Lightning:
the command line names its files in help texts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from gemkd.transfer.io.atomic import atomic_write_bytes

_DAY = re.compile(r"^day=(\d+)\.ckpt$")


class TeacherFitDir:
    """A teacher fit's run directory at ``root`` (module docstring): its files' paths, and the
    readers and writers of the config, the summary and the metrics log."""

    #: the resolved teacher config (YAML)
    CONFIG = "config.yaml"
    #: the fit's summary (JSON)
    SUMMARY = "val_metrics.json"
    #: Lightning's CSV log of the fit (the name its CSV logger gives it: RunCSVLogger)
    METRICS = "metrics.csv"
    #: the checkpoints' folder
    CHECKPOINTS = "checkpoints"
    #: the latest state's file name
    LAST = "last.ckpt"
    #: the best epoch's checkpoint, as Lightning's ModelCheckpoint ``filename`` (no suffix)
    BEST = "best"
    #: how a streaming pass's day checkpoint is named in messages and help texts
    DAY_NAME = "day=N.ckpt"
    #: the folder of the trackers (TensorBoard, MLflow, CSV) a fit logs to by kind
    LOGS = "logs"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @classmethod
    def of_checkpoint(cls, ckpt: str | Path) -> TeacherFitDir:
        """The fit directory that holds ``ckpt`` (a file in its ``checkpoints/``)."""
        return cls(Path(ckpt).parent.parent)

    def __repr__(self) -> str:
        return f"TeacherFitDir({str(self.root)!r})"

    # -- paths -----------------------------------------------------------------------------
    @property
    def checkpoints(self) -> Path:
        return self.root / self.CHECKPOINTS

    @property
    def last(self) -> Path:
        """``checkpoints/last.ckpt``: a file, or the FSDP sharded directory."""
        return self.checkpoints / self.LAST

    @property
    def best(self) -> Path:
        return self.checkpoints / f"{self.BEST}.ckpt"

    @property
    def logs(self) -> Path:
        return self.root / self.LOGS

    @property
    def config_file(self) -> Path:
        return self.root / self.CONFIG

    @property
    def summary_file(self) -> Path:
        return self.root / self.SUMMARY

    @property
    def metrics_file(self) -> Path:
        return self.root / self.METRICS

    def day(self, day: int) -> Path:
        """The checkpoint of a streaming pass after day ``day``."""
        return self.checkpoints / f"day={day}.ckpt"

    @staticmethod
    def checkpoint_day(ckpt: str | Path) -> int | None:
        """The day a day checkpoint was saved after (None for any other checkpoint)."""
        m = _DAY.match(Path(ckpt).name)
        return int(m.group(1)) if m else None

    def days(self) -> dict[int, Path]:
        """Every day checkpoint of the fit, by day."""
        if not self.checkpoints.is_dir():
            return {}
        found = {self.checkpoint_day(p): p for p in self.checkpoints.glob("day=*.ckpt")}
        return {d: found[d] for d in sorted(d for d in found if d is not None)}

    def best_or_last(self) -> Path:
        """The checkpoint the fit's teacher is used from: ``best.ckpt`` where the fit kept its
        best validation epoch, else ``last.ckpt``."""
        return self.best if self.best.exists() else self.last

    def resume_path(self) -> Path | None:
        """``last.ckpt`` (a file, or the FSDP sharded directory) if it exists."""
        return self.last if self.last.exists() else None

    def is_best(self, ckpt: str | Path) -> bool:
        """Whether ``ckpt`` is a fit's best-epoch checkpoint."""
        return Path(ckpt).name == self.best.name

    def drop_last(self) -> None:
        """Remove ``last.ckpt`` (a finished fit that keeps ``best.ckpt`` needs no resume state)."""
        self.last.unlink(missing_ok=True)

    # -- files -----------------------------------------------------------------------------
    def has_config(self) -> bool:
        return self.config_file.is_file()

    def write_config(self, values: dict[str, Any]) -> None:
        """Write the resolved config (keys in the given order), atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(values, sort_keys=False)
        atomic_write_bytes(self.config_file, text.encode())

    def read_config(self) -> dict[str, Any]:
        """The resolved config as written (an empty file reads as ``{}``); OSError when the
        file is missing, ``yaml.YAMLError`` when it is not YAML."""
        return yaml.safe_load(self.config_file.read_text()) or {}

    def has_summary(self) -> bool:
        return self.summary_file.is_file()

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write the fit's summary, atomically."""
        atomic_write_bytes(self.summary_file, json.dumps(summary, indent=2).encode())

    def read_summary(self) -> dict[str, Any]:
        """The fit's summary; OSError when missing, ValueError when not JSON."""
        return json.loads(self.summary_file.read_text())

    def read_metrics(self) -> Any:
        """The metrics log as a pandas DataFrame, or None when the fit wrote none."""
        if not self.metrics_file.is_file():
            return None
        import pandas as pd

        return pd.read_csv(self.metrics_file)

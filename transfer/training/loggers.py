"""Experiment loggers: the CSV record every teacher run keeps, and the trackers users know
(Lightning's ``CSVLogger``, ``TensorBoardLogger``, ``MLFlowLogger``) for any fit.

Trackers write under one directory (``RUN_DIR/logs`` by default): ``csv/<experiment>/<run>/``,
``tensorboard/<experiment>/<run>/`` or an MLflow file store ``mlruns/`` (or the server that
``MLFLOW_TRACKING_URI`` names). TensorBoard and MLflow are optional extras; asking for one that
is not installed is a one-line ``ConfigError`` naming the extra to install.
"""

from __future__ import annotations

import csv
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import TRACKERS, TrackerKind

_EXTRAS = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # tracker -> module it needs


class _ContinuingWriter(ExperimentWriter):
    """Lightning's CSV writer deletes ``metrics.csv`` (with a warning) when its directory holds
    anything: a run directory always does (``config.yaml``, ``checkpoints/``), and a resumed fit
    would lose the rows logged before the kill. This one continues the file and its header."""

    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = sorted(next(csv.reader(f), []))


class RunCSVLogger(CSVLogger):
    """``RUN_DIR/metrics.csv`` and ``hparams.yaml`` of a teacher run, continued on resume."""

    def __init__(self, run_dir: str | Path) -> None:
        super().__init__(run_dir, name="", version="")

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if not isinstance(self._experiment, ExperimentWriter):  # None until the first call
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuingWriter(log_dir=self.log_dir)
        return self._experiment


@dataclass(frozen=True)
class Tracker:
    """Where a run's fits log: ``kind`` (csv, tensorboard, mlflow), the directory ``save_dir``
    and the ``experiment`` (TensorBoard/CSV folder, MLflow experiment) they are grouped under."""

    kind: TrackerKind
    save_dir: Path
    experiment: str

    def __post_init__(self) -> None:
        check_tracker(self.kind)

    @property
    def mlflow_uri(self) -> str:
        """``MLFLOW_TRACKING_URI`` when set, else a file store under ``save_dir``."""
        return os.environ.get("MLFLOW_TRACKING_URI") or \
            (self.save_dir / "mlruns").resolve().as_uri()


def check_tracker(kind: str) -> None:
    """A known tracker whose package is installed, or a ConfigError saying what to install."""
    if kind not in TRACKERS:
        raise ConfigError(f"logger {kind!r}: expected one of {', '.join(TRACKERS)}")
    module = _EXTRAS.get(kind)
    if module is not None and importlib.util.find_spec(module) is None:
        raise ConfigError(f"logger {kind}: the {module} package is not installed; "
                          f"pip install 'gemkd[{kind}]'")


def make_logger(tracker: Tracker, run_name: str, tags: dict[str, Any] | None = None) -> Logger:
    """A Lightning logger for one fit named ``run_name``; ``tags`` (variant, seed, tuned knobs)
    are logged as its hyper-parameters (and as MLflow tags)."""
    tags = {k: _plain(v) for k, v in (tags or {}).items()}
    if tracker.kind == "csv":
        logger: Logger = CSVLogger(tracker.save_dir / "csv", name=tracker.experiment,
                                   version=run_name)
    elif tracker.kind == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        logger = TensorBoardLogger(tracker.save_dir / "tensorboard", name=tracker.experiment,
                                   version=run_name, default_hp_metric=False)
    else:
        from lightning.pytorch.loggers import MLFlowLogger

        uri = _mlflow_store(tracker)
        logger = MLFlowLogger(experiment_name=tracker.experiment, run_name=run_name,
                              tracking_uri=uri, tags={k: str(v) for k, v in tags.items()})
    if tags:
        logger.log_hyperparams(tags)
    return logger


def _mlflow_store(tracker: Tracker) -> str:
    """The tracking URI, with the experiment created up front (Lightning warns when it has to).

    MLflow 3 keeps its file store only behind ``MLFLOW_ALLOW_FILE_STORE``; a local ``mlruns/``
    needs no server or database, so gemkd opts in for the store it chose itself."""
    from mlflow.tracking import MlflowClient

    uri = tracker.mlflow_uri
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    if client.get_experiment_by_name(tracker.experiment) is None:
        from mlflow.exceptions import MlflowException

        try:
            client.create_experiment(tracker.experiment)
        except MlflowException:  # another rank (or run) created it first
            if client.get_experiment_by_name(tracker.experiment) is None:
                raise
    return uri


def _plain(value: Any) -> Any:
    """Tag values as trackers take them: numbers, strings and bools as they are, else str."""
    return value if isinstance(value, int | float | str | bool) else str(value)

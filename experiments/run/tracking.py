"""Experiment tracking of a ``gemkd run`` (``--logger`` / spec key ``logger``): every fit it
makes (the teacher per lag, each tuning candidate, each final student run) is one tracker run,
tagged with its phase, variant, seed, lag and tuned knobs, and the results table is logged once
at the end, as per-variant metrics and the ``results.csv`` / ``tuning.csv`` files."""

from __future__ import annotations

from typing import Any

import pandas as pd
from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger

from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.training.loggers import Tracker, make_logger


def run_tracker(spec: RunSpec, run: RunDir) -> Tracker | None:
    """The run's tracker under ``RUN_DIR/logs`` (None: the spec logs nothing, the default);
    a tracker whose extra is not installed is a ConfigError now, before any work."""
    if spec.logger is None:
        return None
    return Tracker(spec.logger, run.logs_dir, spec.name)


def student_logger(tracker: Tracker | None, phase: str, variant: str, seed: int, lag: int,
                   params: dict[str, Any]):
    """A Lightning logger for one student fit (False when the run is not tracked)."""
    if tracker is None:
        return False
    name = f"{phase}-{variant}-seed{seed}-lag{lag}"
    if phase == "tune":
        name += "-" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    tags = {"phase": phase, "variant": variant, "seed": seed, "lag": lag, **params}
    return make_logger(tracker, name, tags)


def log_results(tracker: Tracker | None, results: pd.DataFrame, run: RunDir) -> None:
    """The results once: the mean over seeds of NE, ΔNE and transfer ratio per variant, task
    and lag (domain ``all``) as metrics of a run named ``results``, plus the CSV files."""
    if tracker is None or results.empty:
        return
    logger = make_logger(tracker, "results", {"phase": "results"})
    table = results[results.domain == "all"].groupby(
        ["teacher_lag_days", "variant", "task"])[["ne", "delta_ne", "transfer_ratio"]].mean()
    for lag, rows in table.groupby(level=0):
        logger.log_metrics({f"{m}/{task}/{variant}": float(v)
                            for (_, variant, task), row in rows.iterrows()
                            for m, v in row.items() if pd.notna(v)}, step=int(lag))
    files = [run.results_path, run.tuning_path]
    if isinstance(logger, MLFlowLogger):  # the tracker's kind: make_logger's class for it
        for f in files:
            logger.experiment.log_artifact(logger.run_id, str(f))
    elif isinstance(logger, TensorBoardLogger):
        for f in files:
            logger.experiment.add_text(f.name, "    " + f.read_text().replace("\n", "\n    "))
    logger.finalize("success")

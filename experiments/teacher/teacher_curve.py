"""How each lag's teacher fit went: its validation curve (per epoch: loss, and NE, AUC and
calibration Σp/Σy per task over every domain), the epoch kept, and the kept teacher's
validation metrics; the runner records them per world and lag in ``RUN_DIR/teacher_fit.json``
(``RunDir.record_teacher_fit``) for the report (a teacher that memorised ids after its best
epoch was invisible in a new user's report).

Read from the fit's own files (its run directory in the cache): ``metrics.csv`` (one row per
validation round, written by Lightning's CSV logger; a resumed fit's rows are appended, so the
last row of an epoch counts), ``val_metrics.json`` and ``config.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

KINDS = ("ne", "auc", "calibration")


def _tasks(columns: Any, prefix: str) -> list[str]:
    """The tasks with a ``<prefix>ne/<task>/all`` column, in column order."""
    return [c[len(prefix):].split("/")[1] for c in columns
            if c.startswith(f"{prefix}ne/") and c.endswith("/all")]


def _metrics(row: Any, tasks: list[str], prefix: str) -> dict[str, dict[str, float]]:
    """``{kind: {task: value}}`` of ``row`` (a mapping) for the tasks' all-domain columns."""
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        values = {t: float(row[f"{prefix}{kind}/{t}/all"]) for t in tasks
                  if f"{prefix}{kind}/{t}/all" in row and pd.notna(row[f"{prefix}{kind}/{t}/all"])}
        if values:
            out[kind] = values
    return out


def fit_entry(run: Path, checkpoint: Path) -> dict[str, Any]:
    """The teacher fit in ``run`` (a ``fit_teacher`` run directory) as used from
    ``checkpoint``: its days, epochs trained of the most allowed, the epoch kept (1-based;
    None: a streaming pass's day checkpoint), the validation curve and the kept teacher's
    validation metrics (empty without validation days)."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    summary = json.loads((run / "val_metrics.json").read_text())
    trained = int(summary["epochs"])
    curve: list[dict[str, Any]] = []
    metrics = run / "metrics.csv"
    if cfg.get("val_days") and metrics.is_file():
        df = pd.read_csv(metrics)
        if "val/loss" in df.columns:
            # rounds during the fit (epoch < epochs trained); the final validation of the kept
            # epoch is logged after them with epoch == epochs trained
            rounds = df[df["val/loss"].notna() & (df["epoch"] < trained)]
            tasks = _tasks(df.columns, "val/")
            for epoch, row in rounds.groupby("epoch").last().iterrows():
                curve.append({"epoch": int(epoch) + 1, "loss": float(row["val/loss"]),
                              **_metrics(row, tasks, "val/")})
    chosen: int | None
    if summary.get("best_epoch") is not None:
        chosen = int(summary["best_epoch"])
    else:
        chosen = None if checkpoint.name.startswith("day=") else trained
    val = summary.get("val") or {}
    return {"config": cfg.get("name"), "train_days": cfg.get("train_days"),
            "val_days": cfg.get("val_days"), "max_epochs": cfg.get("max_epochs"),
            "select": cfg.get("select"), "epochs_trained": trained, "chosen_epoch": chosen,
            "checkpoint": checkpoint.name, "val_curve": curve,
            "val": _metrics(val, _tasks(val, ""), "")}


def summary_line(entry: dict[str, Any]) -> str:
    """One log line: the epoch kept and the validation NE per epoch (the curve), or that the
    fit had no validation days."""
    if not entry["val_curve"]:
        return (f"  teacher fit: {entry['epochs_trained']} epoch(s), no validation days "
                "(nothing to choose from)")
    ne = "; ".join(f"epoch {p['epoch']}: " + ", ".join(f"{t} {v:.4f}" for t, v in
                                                         p.get("ne", {}).items())
                   for p in entry["val_curve"])
    return (f"  teacher fit: epoch {entry['chosen_epoch']} of {entry['epochs_trained']} kept "
            f"(validation NE {ne})")

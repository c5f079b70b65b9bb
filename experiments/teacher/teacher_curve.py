"""How a teacher fit went, read from its run directory: the one reader of its validation curve.

Per epoch the curve holds the validation loss, and NE, AUC and calibration Σp/Σy per task over
every domain; beside it the epoch kept and the kept teacher's validation metrics. The runner
records them per world and lag in ``RUN_DIR/teacher_fit.json`` (``RunDir.record_teacher_fit``:
a teacher that memorised ids after its best epoch was invisible in a new user's report), and the
report reads the cached fits of a run through :func:`read_fit` too.

Read from the fit's own files (:class:`~gemkd.transfer.teacher_fit_dir.TeacherFitDir`):
its metrics log (one row per validation round, written by Lightning's CSV logger; a resumed fit's
rows are appended, so the last row of an epoch counts), its summary and its resolved config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gemkd.transfer.teacher_fit_dir import TeacherFitDir

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


@dataclass(frozen=True)
class FitRecord:
    """A teacher fit as its files say: the resolved config, the summary ``fit_teacher`` wrote,
    the epochs it trained and its validation curve (one point per epoch: ``epoch``, 1-based,
    ``loss`` where logged and ``{kind: {task: value}}``; empty without validation days)."""

    config: dict[str, Any]
    summary: dict[str, Any]
    epochs: int
    curve: list[dict[str, Any]]

    def ne_by_epoch(self, task: str) -> dict[int, float]:
        """The curve's validation NE of ``task`` (every domain), epoch → value."""
        return {p["epoch"]: p["ne"][task] for p in self.curve if task in p.get("ne", {})}


def read_fit(run: TeacherFitDir) -> FitRecord:
    """The fit in ``run``. A fit that has not finished (no summary or config yet) raises OSError;
    a damaged file ValueError or ``yaml.YAMLError``."""
    cfg = run.read_config()
    summary = run.read_summary()
    trained = int(summary.get("epochs") or 0)
    curve: list[dict[str, Any]] = []
    df = run.read_metrics() if cfg.get("val_days") else None
    val = [c for c in df.columns if c.startswith("val/")] if df is not None else []
    if df is not None and val:
        # validation rounds during the fit (epoch < epochs trained); the final validation of
        # the kept epoch is logged after them with epoch == epochs trained
        rounds = df[df[val].notna().any(axis=1) & (df["epoch"] < trained)]
        tasks = _tasks(df.columns, "val/")
        for epoch, row in rounds.groupby("epoch").last().iterrows():
            loss = {"loss": float(row["val/loss"])} if pd.notna(row.get("val/loss")) else {}
            curve.append({"epoch": int(epoch) + 1, **loss, **_metrics(row, tasks, "val/")})
    return FitRecord(cfg, summary, trained, curve)


def fit_entry(checkpoint: Path) -> dict[str, Any]:
    """The teacher fit that holds ``checkpoint`` (a ``fit_teacher`` run directory's), as used
    from it: its days, epochs trained of the most allowed, the epoch kept (1-based; None: a
    streaming pass's day checkpoint), the validation curve and the kept teacher's validation
    metrics (empty without validation days)."""
    fit = read_fit(TeacherFitDir.of_checkpoint(checkpoint))
    cfg, summary = fit.config, fit.summary
    chosen: int | None
    if summary.get("best_epoch") is not None:
        chosen = int(summary["best_epoch"])
    else:
        chosen = None if TeacherFitDir.checkpoint_day(checkpoint) is not None else fit.epochs
    val = summary.get("val") or {}
    return {"config": cfg.get("name"), "train_days": cfg.get("train_days"),
            "val_days": cfg.get("val_days"), "max_epochs": cfg.get("max_epochs"),
            "select": cfg.get("select"), "epochs_trained": fit.epochs, "chosen_epoch": chosen,
            "checkpoint": Path(checkpoint).name, "val_curve": fit.curve,
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

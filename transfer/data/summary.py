"""A per-day table describing a dataset: size, label rates, oracle NE, history lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from transfer.data import validate
from transfer.data.schema import DatasetSchema
from transfer.data.writer import day_path


def binary_entropy(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return float("nan")
    return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def summarize(root: str | Path) -> pd.DataFrame:
    """One row per day plus ``all``; oracle NE uses the base rate of all days, as DESIGN §6."""
    schema = DatasetSchema.load(root)
    seq = schema.sequence[0].name if schema.sequence else None
    cols = ["domain", *schema.tasks, *schema.oracle.values()] + ([seq] if seq else [])
    frames = []
    for day in schema.days:
        path = day_path(root, day)
        table = validate.open_parquet(path).read(columns=cols)
        frame = pd.DataFrame({c: table.column(c).to_numpy() for c in cols if c != seq})
        if seq:
            frame["history"] = pc.list_value_length(table.column(seq)).to_numpy()
        frame["day"] = day
        frames.append(frame)
    data = pd.concat(frames, ignore_index=True)
    base = {t: float(data[t].mean()) for t in schema.tasks}
    rows = []
    for day, part in [*data.groupby("day"), ("all", data)]:
        row: dict = {"day": day, "examples": len(part)}
        for t in schema.tasks:
            row[f"{t}_rate"] = part[t].mean()
        for t, p in schema.oracle.items():
            row[f"oracle_ne_{t}"] = log_loss(part[t].to_numpy(), part[p].to_numpy()) / \
                binary_entropy(base[t])
        if seq:
            row["hist_mean"] = part["history"].mean()
            row["hist_p50"] = part["history"].median()
            row["hist_p99"] = part["history"].quantile(0.99)
            row["hist_max"] = part["history"].max()
        shares = np.bincount(part["domain"], minlength=len(schema.domains)) / len(part)
        for name, share in zip(schema.domains, shares, strict=True):
            row[f"share_{name}"] = share
        rows.append(row)
    return pd.DataFrame(rows)

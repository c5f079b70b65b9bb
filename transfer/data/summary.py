"""A per-day table describing a dataset: size, label rates, oracle NE, history lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.data.writer import read_day
from gemkd.transfer.metrics.numerics import normalized_entropy


def summarize(root: str | Path) -> pd.DataFrame:
    """One row per day plus ``all``; oracle NE uses the base rate of all days, as DESIGN §6."""
    schema = DatasetSchema.load(root)
    seq = schema.sequence[0].name if schema.sequence else None
    cols = ["domain", *schema.tasks, *schema.oracle.values()] + ([seq] if seq else [])
    frames = []
    for day in schema.days:
        table = read_day(root, day, cols)
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
            row[f"oracle_ne_{t}"] = normalized_entropy(part[t].to_numpy(), part[p].to_numpy(),
                                                        base[t])
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


def tables(root: str | Path) -> pd.DataFrame:
    """One row per embedding table a model builds from the schema: each categorical and
    sequence feature with its rows (the cardinality; a model caps it at its ``max_rows``)."""
    schema = DatasetSchema.load(root)
    rows = [{"table": f.name, "kind": kind, "rows": f.cardinality}
            for kind, feats in (("categorical", schema.categorical),
                                ("sequence", schema.sequence)) for f in feats]
    return pd.DataFrame(rows, columns=["table", "kind", "rows"])


def impressions_per_user(root: str | Path, first_days: int = 9) -> pd.DataFrame:
    """Impressions per user (p10/p50/p90, mean) over all days and over the first ``first_days``
    days (the quickstart teacher's window); users are those with any row in the dataset."""
    schema = DatasetSchema.load(root)
    users, days = [], []
    for d in schema.days:
        col = read_day(root, d, ["user_id"]).column(0)
        users.append(col.to_numpy())
        days.append(np.full(len(users[-1]), d))
    user, day = np.concatenate(users), np.concatenate(days)
    ids, idx = np.unique(user, return_inverse=True)
    rows = []
    first = schema.days[:first_days]
    windows = [("all days", np.ones(len(user), bool))]
    if first:
        windows.append((f"days {first[0]}-{first[-1]}", day <= first[-1]))
    for name, m in windows:
        counts = np.bincount(idx[m], minlength=len(ids))
        rows.append({"window": name, "users": len(ids), "p10": np.percentile(counts, 10),
                     "p50": np.median(counts), "p90": np.percentile(counts, 90),
                     "mean": counts.mean()})
    return pd.DataFrame(rows)


def feature_oracle_summary(root: str | Path, n_days: int = 2) -> pd.DataFrame | None:
    """Synthetic data only: oracle, no-user-information and feature-oracle NE per task, by
    history length, on the last ``n_days`` days (``gemkd.transfer.data.synth.feature_oracle``)."""
    schema = DatasetSchema.load(root)
    if schema.source != "synthetic" or not schema.generator:
        return None
    from gemkd.transfer.data.synth.feature_oracle import feature_oracle_ne

    days = schema.days[-n_days:]
    frame = feature_oracle_ne(root, days)
    frame.attrs["title"] = (f"feature oracle, days {days[0]}-{days[-1]}, all domains "
                            f"(share = part of the oracle's advantage over no user information)")
    return frame

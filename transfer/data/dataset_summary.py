"""A per-day table describing a dataset: size, label rates, oracle NE, history lengths."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gemkd.transfer.data import validate
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.metrics.numerics import EPS, log_loss, ne_from_mean_loss


def day_tables(root: str | Path,
               columns: list[str]) -> Iterator[tuple[int, Iterator[pa.Table]]]:
    """Each day of the dataset with ``columns`` of its rows, read one row group at a time as the
    inner iterator is consumed (through the reader's units: every file of the day, in order).
    Memory: one row group, plus what the caller keeps."""
    reader = DatasetReader(root, batch_size=1)
    by_day: dict[int, list] = {}
    for u in reader.units:
        by_day.setdefault(u.day, []).append(u)
    for day in reader.days:
        yield day, validate.read_units(by_day.get(day, []), columns)


def calendar_of(schema: DatasetSchema) -> str | None:
    """The time zone of an imported dataset's calendar days (the mapping's ``days: {calendar:
    TZ}``), None for other datasets (synthetic worlds, equal-count buckets)."""
    mapping = (schema.generator or {}).get("mapping") or {}
    days = mapping.get("days") if isinstance(mapping, dict) else None
    calendar = days.get("calendar") if isinstance(days, dict) else None
    return calendar if isinstance(calendar, str) else None


def bucket_dates(schema: DatasetSchema) -> dict[str, list[str]]:
    """An imported dataset's days as time buckets (``days: {buckets: N}``): each day's first
    and last event date (UTC), from ``schema.json``'s ``generator.day_dates``; empty for
    calendar days and other datasets."""
    spans = (schema.generator or {}).get("day_dates")
    return spans if isinstance(spans, dict) else {}


def summarize(root: str | Path) -> pd.DataFrame:
    """A dataset's rates and histories per day (``gemkd data summary``).

    Parameters
    ----------
    root
        The dataset.

    Returns
    -------
    pandas.DataFrame
        One row per day plus ``all``: the day's local date (a dataset imported with calendar
        days) or its bucket's first and last date (imported with time buckets), examples,
        each task's rate, the oracle's NE (against the base rate of all days, as DESIGN §6)
        where the data has one, history length statistics
        where it has histories.

    Notes
    -----
    One day in memory at a time: a day's row is computed from its rows; ``all`` from the days'
    sums (labels, log losses, domain counts) and a histogram of history lengths, which gives
    the same mean, median and p99 as the rows themselves (the oracle NE of ``all`` may differ
    from a sum over every row in the last bits: the days' losses are added, not pairwise).
    """
    schema = DatasetSchema.load(root)
    seq = schema.sequence[0].name if schema.sequence else None
    calendar = calendar_of(schema)
    spans = bucket_dates(schema)
    cols = (["domain", *schema.tasks, *schema.oracle.values()] + ([seq] if seq else [])
            + (["ts"] if calendar else []))
    n_dom = len(schema.domains)
    days: list[dict] = []
    n_all = 0
    positives = {t: 0 for t in schema.tasks}
    losses = {t: 0.0 for t in schema.oracle}
    domains = np.zeros(n_dom, np.int64)
    hist_counts = np.zeros(0, np.int64)  # rows by history length
    for day, groups in day_tables(root, cols):
        pieces: dict[str, list[np.ndarray]] = {c: [] for c in cols}
        for t in groups:  # the history lists are dropped a row group at a time
            for c in cols:
                pieces[c].append(pc.list_value_length(t.column(c)).to_numpy() if c == seq
                                 else t.column(c).to_numpy())
        part = {c: np.concatenate(v) for c, v in pieces.items() if v}
        n = len(part["domain"]) if part else 0
        if n == 0:
            continue
        row: dict = {"day": day}
        if calendar:  # the local date of the day's median event (imported with calendar days;
            # not its first: a `date_column` may put a few rows stamped the evening before in it)
            mid = pd.Timestamp(int(np.median(part["ts"])), unit="s", tz="UTC")
            row["date"] = mid.tz_convert(calendar).date().isoformat()
        elif spans:  # a time bucket: the dates of its first and last event
            first, last = spans.get(str(day), ("", ""))
            row["dates"] = first if first == last else f"{first} to {last}"
        row["examples"] = n
        for t in schema.tasks:
            row[f"{t}_rate"] = pd.Series(part[t]).mean()
            positives[t] += int(part[t].sum(dtype=np.int64))
        for t, p in schema.oracle.items():
            loss = float(np.atleast_1d(log_loss(part[t], part[p], EPS)).mean())
            row[f"_loss_{t}"] = loss
            losses[t] += loss * n
        if seq:
            hist = pd.Series(part[seq])
            row["hist_mean"] = hist.mean()
            row["hist_p50"] = hist.median()
            row["hist_p99"] = hist.quantile(0.99)
            row["hist_max"] = hist.max()
            counts = np.bincount(hist.to_numpy())
            if len(counts) < len(hist_counts):
                counts = np.pad(counts, (0, len(hist_counts) - len(counts)))
            counts[:len(hist_counts)] += hist_counts
            hist_counts = counts
        row["_domains"] = np.bincount(part["domain"], minlength=n_dom)
        domains += row["_domains"]
        n_all += n
        days.append(row)
    base = {t: positives[t] / n_all if n_all else math.nan for t in schema.tasks}
    rows = [_finish(row, schema, base) for row in days]
    if n_all:
        row = {"day": "all", **({"date": ""} if calendar else {"dates": ""} if spans else {}),
               "examples": n_all}
        for t in schema.tasks:
            row[f"{t}_rate"] = base[t]
        for t in schema.oracle:
            row[f"_loss_{t}"] = losses[t] / n_all
        if seq:
            values = np.flatnonzero(hist_counts)
            freq = hist_counts[values]
            row["hist_mean"] = float(int((values * freq).sum())) / n_all
            row["hist_p50"] = _quantile_of_counts(values, freq, 0.5)
            row["hist_p99"] = _quantile_of_counts(values, freq, 0.99)
            row["hist_max"] = int(values.max())
        row["_domains"] = domains
        rows.append(_finish(row, schema, base))
    return pd.DataFrame(rows)


def tables(root: str | Path) -> pd.DataFrame:
    """One row per embedding table a model builds from the schema: each categorical and
    sequence feature with its rows (the cardinality; a model caps it at its ``max_rows``)."""
    schema = DatasetSchema.load(root)
    rows = [{"table": f.name, "kind": kind, "rows": f.cardinality}
            for kind, feats in (("categorical", schema.categorical),
                                ("sequence", schema.sequence)) for f in feats]
    return pd.DataFrame(rows, columns=["table", "kind", "rows"])


def _finish(row: dict, schema: DatasetSchema, base: dict[str, float]) -> dict:
    """A summary row in its columns' order: oracle NE against the all-days base rate, then
    history and domain shares."""
    out = {k: v for k, v in row.items() if not k.startswith("_") and not k.startswith("hist")}
    for t in schema.oracle:
        out[f"oracle_ne_{t}"] = float(ne_from_mean_loss(row[f"_loss_{t}"], base[t]))
    out.update({k: v for k, v in row.items() if k.startswith("hist")})
    shares = row["_domains"] / row["examples"]
    for name, share in zip(schema.domains, shares, strict=True):
        out[f"share_{name}"] = share
    return out


def _quantile_of_counts(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``pd.Series(np.repeat(values, counts)).quantile(q)`` (linear, numpy's arithmetic to the
    last bit) without the repeated array: the two order statistics come from cumulative counts."""
    n = int(counts.sum())
    virtual = (n - 1) * np.float64(q)  # numpy's "linear" virtual index
    lo = int(np.floor(virtual))
    lo, hi = (n - 1, n - 1) if virtual >= n - 1 else (lo, lo + 1)
    ends = np.cumsum(counts)
    a, b = (np.float64(values[np.searchsorted(ends, i, side="right")]) for i in (lo, hi))
    t = virtual - np.floor(virtual)
    return float(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)


def impressions_per_user(root: str | Path, first_days: int = 9) -> pd.DataFrame:
    """Impressions per user (p10/p50/p90, mean) over all days and over the first ``first_days``
    days (the quickstart teacher's window), each over the users with a row in that window
    (``users``: how many; a user of later days only is not a zero in the first days' figures).

    A day at a time: memory is the users' counts, not the rows."""
    schema = DatasetSchema.load(root)
    first = schema.days[:first_days]
    counts = {"all": pd.Series(dtype=np.int64), "first": pd.Series(dtype=np.int64)}
    for d, groups in day_tables(root, ["user_id"]):
        users = np.concatenate([t.column(0).to_numpy() for t in groups])
        ids, n = np.unique(users, return_counts=True)
        day_counts = pd.Series(n, index=ids)
        keys = ["all", "first"] if first and d <= first[-1] else ["all"]
        for k in keys:
            counts[k] = counts[k].add(day_counts, fill_value=0).astype(np.int64)
    every = counts["all"]
    rows = []
    windows = [("all days", every)]
    if first and len(counts["first"]):
        windows.append((f"days {first[0]}-{first[-1]}", counts["first"]))
    for name, c in windows:
        c = c.to_numpy()
        rows.append({"window": name, "users": len(c), "p10": np.percentile(c, 10),
                     "p50": np.median(c), "p90": np.percentile(c, 90), "mean": c.mean()})
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

"""Writing imported rows: day partitions with histories gathered from the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from gemkd.transfer.data.dataset_writer import write_day
from gemkd.transfer.data.ranges import age_buckets, gather_ranges, history_ranges
from gemkd.transfer.data.schema import DatasetSchema


@dataclass
class Events:
    """What a history is made of: every row is an event of its user.

    ``user`` and ``t`` (nanoseconds) are per row in time order; ``fields`` maps each history
    column to its per-row event value, or to None for ``hist_age`` (relative to the reading row).
    ``logged`` (None: every row) marks the rows that are real events: a sampled negative is no
    engagement, so it is in no history; it reads the history of the logged row before it (its
    positive, at the same time).
    """

    user: np.ndarray
    t: np.ndarray
    fields: dict[str, np.ndarray | None]
    max_events: int
    logged: np.ndarray | None = None


def write_dataset(schema: DatasetSchema, cols: dict[str, np.ndarray], events: Events,
                  root: Path) -> None:
    """Write ``cols`` (rows in time order, ``day`` non-decreasing) as day partitions under
    ``root`` and fill ``schema.rows_per_day``."""
    arrow = schema.arrow_schema()
    day = cols["day"]
    if np.any(np.diff(day) < 0):
        raise AssertionError("days must not decrease in time order")
    ts = cols["ts"]
    if events.fields:
        perm, start, end, pos_of = _history_index(events)
    for d in schema.days:
        lo, hi = int(np.searchsorted(day, d, "left")), int(np.searchsorted(day, d, "right"))
        arrays = {f.name: pa.array(cols[f.name][lo:hi], type=f.type)
                  for f in arrow if f.name in cols}
        if events.fields:
            pos = pos_of[lo:hi]
            lengths = end[pos] - start[pos]
            offsets, idx = gather_ranges(start[pos], lengths)
            ev = perm[idx]  # example ids of the events, oldest first per row
            o = pa.array(offsets.astype(np.int32))
            for name, values in events.fields.items():
                v = age_buckets(ts[lo:hi], lengths, ts[ev]) if values is None else values[ev]
                typ = arrow.field(name).type
                arrays[name] = pa.ListArray.from_arrays(o, pa.array(v, type=typ.value_type))
        table = pa.Table.from_arrays([arrays[f.name] for f in arrow], schema=arrow)
        write_day(table, root, d)
        schema.rows_per_day[str(d)] = hi - lo


def _history_index(events: Events) -> tuple[np.ndarray, ...]:
    """History ranges over the logged rows in (user, time) order: ``perm`` maps that order back
    to example ids, ``start``/``end`` are each position's range and ``pos_of`` every row's
    position (a sampled row takes its positive's)."""
    n = len(events.t)
    rows = np.arange(n)
    if events.logged is None:
        host = rows
    else:
        rows = np.flatnonzero(events.logged)
        host = np.maximum.accumulate(np.where(events.logged, np.arange(n), 0))
    perm = rows[np.lexsort((rows, events.t[rows], events.user[rows]))]
    start, end = history_ranges(events.user[perm], events.t[perm], events.max_events)
    pos_of = np.empty(n, dtype=np.int64)
    pos_of[perm] = np.arange(len(perm))
    return perm, start, end, pos_of[host]

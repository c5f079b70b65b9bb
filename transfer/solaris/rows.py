"""Synthetic rows for precomputed pairs: user u × item i as of the end of day d − 1.

A store row is one impression; a precomputed pair has none yet, so its row is made the way a
served one would look: the user's side (user features, context, the history sequence) from u's
latest row before d, the item's side (the columns that are fixed per item: its id, advertiser,
category, format, creative) from i's latest row before d. Labels are copied from the user's row
and never read (the teacher's forward pass takes features only).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from gemkd.transfer.data.schema import DatasetSchema


def latest(table: pa.Table, key: str) -> pa.Table:
    """The last row (by ``ts``, then position) of each ``key`` value in ``table``."""
    if table.num_rows == 0:
        return table
    f = pd.DataFrame({"k": table.column(key).to_numpy(), "ts": table.column("ts").to_numpy(),
                      "at": np.arange(table.num_rows)})
    last = f.sort_values(["k", "ts", "at"], kind="stable").drop_duplicates("k", keep="last")
    return table.take(pa.array(last["at"].to_numpy()))


class LatestRows:
    """The latest row of every user and of every item seen so far, updated a day at a time
    (days must be added in order: the rows then stand for the end of the last day added)."""

    def __init__(self, item: str) -> None:
        self.item = item
        self.users: pa.Table | None = None
        self.items: pa.Table | None = None
        self.last_day: int | None = None

    def add_day(self, day: int, table: pa.Table) -> None:
        if self.last_day is not None and day <= self.last_day:
            raise ValueError(f"LatestRows: day {day} added after day {self.last_day}")
        self.last_day = day
        for attr, key in (("users", "user_id"), ("items", self.item)):
            old = getattr(self, attr)
            both = table if old is None else pa.concat_tables([old, table.cast(old.schema)])
            setattr(self, attr, latest(both, key))


def item_columns(schema: DatasetSchema, table: pa.Table, item: str) -> list[str]:
    """The scalar feature columns (categorical, dense, ``domain``) that hold one value per item
    in ``table``: the item's side of a synthetic row. The item id itself always is."""
    cands = [c for c in (*(f.name for f in schema.categorical), *schema.dense, "domain")
             if c not in (item, "user_id")]
    frame = table.select([item, *cands]).to_pandas()
    per_item = frame.groupby(item).nunique(dropna=False).max()
    return [item, *(c for c in cands if per_item.get(c, 2) <= 1)]


def pair_rows(latest_rows: LatestRows, user_id: np.ndarray, items: np.ndarray,
              columns: list[str], day: int) -> tuple[pa.Table, np.ndarray]:
    """One synthetic row per pair (``example_id`` = the pair's position) on ``day``, and the
    positions of the pairs that got one (a user or item never seen before gets none)."""
    users, its = latest_rows.users, latest_rows.items
    if users is None or its is None:
        raise ValueError("LatestRows holds no day yet")
    u_at = pd.Index(users.column("user_id").to_numpy()).get_indexer(user_id)
    i_at = pd.Index(its.column(latest_rows.item).to_numpy()).get_indexer(items)
    ok = np.flatnonzero((u_at >= 0) & (i_at >= 0))
    rows = users.take(pa.array(u_at[ok]))
    item_side = its.take(pa.array(i_at[ok]))
    for c in columns:
        rows = rows.set_column(rows.schema.get_field_index(c), c, item_side.column(c))
    n = rows.num_rows
    rows = rows.set_column(rows.schema.get_field_index("example_id"), "example_id",
                           pa.array(ok.astype(np.int64)))
    rows = rows.set_column(rows.schema.get_field_index("day"), "day",
                           pa.array(np.full(n, day, dtype=np.int32)))
    return rows, ok

"""The rows of a code store an as-of index over a day range needs, read a row group at a time
(DESIGN §5, LoopFM).

A student reads its own days. An example at time t reads its user's ``max_events`` latest codes
with ``ts < t``, so of everything before its days only each user's ``max_events`` latest codes
can ever be read, and nothing from after its days. With ``lo`` the last second stored before
the first day and ``hi`` the first second stored from the end day on (days are in time order in
every gemkd dataset, so the scope's examples have ``lo <= t <= hi``), the index keeps:

- every code with ``lo <= ts < hi``;
- each user's latest ``max_events`` codes with ``ts < lo``.

For a query with ``lo <= t <= hi`` that is exactly what the whole store gives: the codes with
``ts < t`` are the user's codes before ``lo`` (of which a lookup reads at most the latest
``max_events``) and those from ``lo`` on, all kept. Memory: the scope's codes plus at most
``max_events`` per user, whatever the log's length before and after; the store's file is read
one row group at a time (it is sorted by user and time, so each user's codes before ``lo`` are
contiguous in a row group: a user spanning two row groups may keep up to twice ``max_events``,
never fewer than needed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gemkd.transfer.errors import StoreError
from gemkd.transfer.repr_features.codes import CodeStore, dequantize_codes


@dataclass
class ScopedRows:
    """Kept rows (``user_id``, ``ts`` int64, dequantised ``codes`` float32) in the file's order,
    whether that order is sorted by ``(user_id, ts)``, and the query times they answer exactly
    (``lo <= t <= hi``; None: unbounded)."""

    user_id: np.ndarray
    ts: np.ndarray
    codes: np.ndarray
    is_sorted: bool
    lo: int | None = None
    hi: int | None = None


def scope_bounds(store: CodeStore, days: tuple[int, int]) -> tuple[int | None, int | None]:
    """``(lo, hi)``: the last second stored before day ``days[0]`` and the first stored from day
    ``days[1]`` on (None where there is none), by one pass over the ``day`` and ``ts`` columns."""
    first, end = days
    lo: int | None = None
    hi: int | None = None
    for table in store.iter_row_groups(["day", "ts"]):
        day, ts = table.column("day").to_numpy(), table.column("ts").to_numpy()
        before, after = ts[day < first], ts[day >= end]
        if len(before):
            lo = int(before.max()) if lo is None else max(lo, int(before.max()))
        if len(after):
            hi = int(after.min()) if hi is None else min(hi, int(after.min()))
    return lo, hi


def scoped_rows(store: CodeStore, max_events: int, days: tuple[int, int] | None) -> ScopedRows:
    """The rows an as-of index over ``days`` (half-open; None: every row) keeps, read a row
    group at a time.

    Raises
    ------
    StoreError
        ``days`` given and the file not sorted by ``(user_id, ts)`` (only gemkd's writers make
        code stores, and they sort).
    """
    lo, hi = (None, None) if days is None else scope_bounds(store, days)
    parts: dict[str, list[np.ndarray]] = {"user_id": [], "ts": [], "codes": []}
    is_sorted, last = True, None
    for table in store.iter_row_groups(["user_id", "ts", "code"]):
        uid, ts = table.column("user_id").to_numpy(), table.column("ts").to_numpy()
        if len(uid) == 0:
            continue
        if is_sorted:
            is_sorted = _is_sorted(uid, ts) and (last is None or last <= (uid[0], ts[0]))
            last = (uid[-1], ts[-1])
        if not is_sorted and days is not None:
            raise StoreError(f"{store.file}: rows not sorted by (user_id, ts); an as-of index "
                             f"over days {list(days)} needs the order the code writers make")
        keep = _keep(uid, ts, max_events, lo, hi)
        q = store.codes_q(table)
        if keep is not None:
            uid, ts, q = uid[keep], ts[keep], q[keep]
        parts["user_id"].append(uid)
        parts["ts"].append(ts)
        parts["codes"].append(dequantize_codes(q, store.bits, store.code_dim))
    cat = {k: np.concatenate(v) if v else None for k, v in parts.items()}
    return ScopedRows(
        user_id=cat["user_id"] if cat["user_id"] is not None else np.zeros(0, np.int64),
        ts=cat["ts"] if cat["ts"] is not None else np.zeros(0, np.int64),
        codes=(cat["codes"] if cat["codes"] is not None
               else np.zeros((0, store.code_dim), np.float32)),
        is_sorted=is_sorted, lo=lo, hi=hi)


def _keep(uid: np.ndarray, ts: np.ndarray, max_events: int, lo: int | None, hi: int | None
          ) -> np.ndarray | None:
    """Which rows of one sorted row group the scope keeps (None: all)."""
    if lo is None and hi is None:
        return None
    keep = np.ones(len(uid), dtype=bool) if hi is None else ts < hi
    if lo is not None:
        before = ts < lo
        # runs of one user's rows on one side of lo; a row before lo is kept when at most
        # max_events rows of its run end with it
        change = np.flatnonzero((uid[1:] != uid[:-1]) | (before[1:] != before[:-1])) + 1
        starts = np.concatenate([[0], change])
        ends = np.append(change, len(uid))
        run_end = np.repeat(ends, ends - starts)
        keep &= ~before | (run_end - np.arange(len(uid)) <= max_events)
    return keep


def _is_sorted(uid: np.ndarray, ts: np.ndarray) -> bool:
    du = np.diff(uid)
    return bool((du >= 0).all() and (np.diff(ts)[du == 0] >= 0).all())


def rows_from_day(store: CodeStore, max_events: int, first_day: int) -> Iterator[pa.Table]:
    """The store's rows (every column, codes still quantised) an as-of index from day
    ``first_day`` on needs, a row group at a time: every code from that day on and each
    user's ``max_events`` latest before it. A smaller code store written from them answers
    every lookup at or after the day as the whole store does (a student artifact's code
    table)."""
    lo, _ = scope_bounds(store, (first_day, np.iinfo(np.int32).max))
    for table in store.iter_row_groups():
        uid, ts = table.column("user_id").to_numpy(), table.column("ts").to_numpy()
        if not _is_sorted(uid, ts):
            raise StoreError(f"{store.file}: rows not sorted by (user_id, ts)")
        keep = _keep(uid, ts, max_events, lo, None)
        yield table if keep is None else table.filter(pa.array(keep))

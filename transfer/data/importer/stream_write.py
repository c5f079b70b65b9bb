"""The write side of the streaming import (:mod:`.stream`): each user's recent events carried
from one date to the next for the histories, and a day written a row group at a time into part
files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.data.dataset_writer import ROW_GROUP_SIZE, part_path

# a partition's histories: each row's range [start, end) in the merged events, their times
# (ns) and field values
Hist = tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]


class Carry:
    """Each user's most recent events (at most ``max_events``), carried between partitions and
    kept in (user, time, example id) order, so a partition joins them by a merge, not a sort."""

    def __init__(self, names: list[str], max_events: int) -> None:
        self.max_events = max_events
        empty = np.zeros(0, dtype=np.int64)
        self.user, self.t = empty, empty
        self.values: dict[str, np.ndarray] = {n: np.zeros(0) for n in names}

    def join(self, user: np.ndarray, t: np.ndarray, eid: np.ndarray,
             values: dict[str, np.ndarray]) -> Hist:
        """The carried events and a partition's rows merged in (user, time, example id) order
        (every carried event is earlier than the partition's rows of its user); each row's
        history range in that order, the merged times and field values. The carry then keeps
        each user's last ``max_events`` of them for the next partition."""
        k, n = len(self.user), len(user)
        order = np.lexsort((eid, t, user))
        pu = user[order]
        at_carry = np.arange(k) + np.searchsorted(pu, self.user, side="left")
        at_rows = np.arange(n) + np.searchsorted(self.user, pu, side="right")
        del pu

        where = (at_carry, at_rows, order)
        mu, mt = _merge(self.user, user, where), _merge(self.t, t, where)
        vals = {name: _merge(self.values[name], v, where) for name, v in values.items()}
        del where
        pos = np.empty(n, dtype=np.int64)
        pos[order] = at_rows  # each row's place in the merged order, in the partition's order
        del at_carry, at_rows, order
        self.user = self.t = np.zeros(0, dtype=np.int64)  # the merged arrays hold them now
        self.values = {}
        start, end = _ranges_at(mu, mt, pos, self.max_events)
        keep = _last_per_user(mu, self.max_events)
        self.user, self.t = mu[keep], mt[keep]
        self.values = {name: v[keep] for name, v in vals.items()}
        return start, end, mt, vals


def _merge(carried: np.ndarray, rows: np.ndarray,
           where: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Carried values and a partition's values (in its ``order``) at their merged places."""
    at_carry, at_rows, order = where
    out = np.empty(len(carried) + len(rows), dtype=rows.dtype)
    out[at_carry] = carried
    out[at_rows] = rows[order]
    return out


def _ranges_at(user: np.ndarray, t: np.ndarray, at: np.ndarray, max_history: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """``ranges.history_ranges`` of the rows ``at`` only (arrays sorted by user and time),
    without the two full-length range arrays."""
    idx = np.arange(len(user))
    new_user = np.r_[True, user[1:] != user[:-1]]
    first = np.maximum.accumulate(np.where(new_user, idx, 0))[at]  # each row's user's first
    new_t = new_user
    new_t[1:] |= t[1:] != t[:-1]
    end = np.maximum.accumulate(np.where(new_t, idx, 0))[at]  # first row of its (user, time)
    return np.maximum(first, end - max_history), end


def _last_per_user(user: np.ndarray, keep: int) -> np.ndarray:
    """A mask of each user's last ``keep`` positions (``user`` sorted)."""
    n = len(user)
    last = np.r_[user[1:] != user[:-1], True]
    user_end = np.minimum.accumulate(np.where(last, np.arange(n), n)[::-1])[::-1]
    return np.arange(n) > user_end - keep


class DayWriter:
    """A day's part files, written a row group at a time: rows are buffered only up to a row
    group, and a part file is closed after ``part_rows`` rows."""

    def __init__(self, root: Path, day: int, schema: pa.Schema, part_rows: int) -> None:
        self.root, self.day, self.schema, self.part_rows = root, day, schema, part_rows
        self.buffer: list[pa.Table] = []
        self.buffered = self.rows = self.in_part = self.parts = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> None:
        self.buffer.append(table)
        self.buffered += table.num_rows
        while self.buffered >= ROW_GROUP_SIZE:
            self._flush(ROW_GROUP_SIZE)

    def close(self) -> int:
        if self.buffered:
            self._flush(self.buffered)
        if self.writer is not None:
            self.writer.close()
        return self.rows

    def _flush(self, n: int) -> None:
        table = pa.concat_tables(self.buffer)
        group, rest = table.slice(0, n), table.slice(n)
        self.buffer, self.buffered = ([rest] if rest.num_rows else []), rest.num_rows
        if self.writer is None or self.in_part >= self.part_rows:
            if self.writer is not None:
                self.writer.close()
            path = Path(part_path(self.root, self.day, self.parts))
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(path, self.schema, compression="snappy")
            self.parts += 1
            self.in_part = 0
        self.writer.write_table(group.combine_chunks(), row_group_size=ROW_GROUP_SIZE)
        self.in_part += n
        self.rows += n

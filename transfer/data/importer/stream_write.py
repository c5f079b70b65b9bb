"""The write side of the streaming import (:mod:`.stream`): each user's recent events carried
from one date to the next for the histories (a day is written a row group at a time into part
files by ``writer.DayWriter``)."""

from __future__ import annotations

import numpy as np

from gemkd.transfer.data.ranges import last_per_user, merge_at

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
        mu, mt = merge_at(self.user, user, where), merge_at(self.t, t, where)
        vals = {name: merge_at(self.values[name], v, where) for name, v in values.items()}
        del where
        pos = np.empty(n, dtype=np.int64)
        pos[order] = at_rows  # each row's place in the merged order, in the partition's order
        del at_carry, at_rows, order
        self.user = self.t = np.zeros(0, dtype=np.int64)  # the merged arrays hold them now
        self.values = {}
        start, end = _ranges_at(mu, mt, pos, self.max_events)
        keep = last_per_user(mu, self.max_events)
        self.user, self.t = mu[keep], mt[keep]
        self.values = {name: v[keep] for name, v in vals.items()}
        return start, end, mt, vals


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

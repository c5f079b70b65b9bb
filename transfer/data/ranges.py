"""Host-side jagged gathers in numpy: the one idiom every data source and the reader share."""

from __future__ import annotations

import numpy as np

N_AGE_BUCKETS = 16  # hist_age = floor(log2(1 + hours before the row)), capped


def gather_ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets ``[B+1]`` and flat indices of the ranges ``[starts[i], starts[i] + lengths[i])``."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return offsets, idx


def age_buckets(row_ts: np.ndarray, lengths: np.ndarray, event_ts: np.ndarray) -> np.ndarray:
    """Log-bucketed age in hours of each event relative to its row's timestamp."""
    hours = (np.repeat(row_ts, lengths) - event_ts) / 3600.0
    return np.minimum(np.log2(1.0 + hours).astype(np.int32), N_AGE_BUCKETS - 1)


def history_ranges(user: np.ndarray, t: np.ndarray, max_history: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of arrays sorted by (user, time): the half-open range of its history.

    The history is the user's rows strictly before the row's time (rows at the same time are
    excluded, so nothing simultaneous can leak), capped at the ``max_history`` most recent.
    """
    n = len(user)
    pos = np.arange(n)
    new_user = np.r_[True, user[1:] != user[:-1]]
    user_start = np.maximum.accumulate(np.where(new_user, pos, 0))
    new_t = new_user | np.r_[True, t[1:] != t[:-1]]
    end = np.maximum.accumulate(np.where(new_t, pos, 0))  # first row of this (user, time)
    start = np.maximum(user_start, end - max_history)
    return start, end


def equal_count_days(ts: np.ndarray, n_days: int) -> np.ndarray:
    """Day index of each timestamp: ``n_days`` time buckets holding about equal row counts."""
    edges = np.quantile(ts, np.linspace(0, 1, n_days + 1)[1:-1])
    return np.searchsorted(edges, ts, side="right").astype(np.int32)


def merge_at(carried: np.ndarray, rows: np.ndarray,
             where: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Two sorted runs merged without a sort: ``carried`` at the places ``at_carry`` and
    ``rows`` (taken in their sorted ``order``) at ``at_rows``, the places a merge computed by
    ``searchsorted`` (the streaming importer's carried events and a date's rows; the
    synthetic world's carried events and a day's)."""
    at_carry, at_rows, order = where
    out = np.empty(len(carried) + len(rows), dtype=rows.dtype)
    out[at_carry] = carried
    out[at_rows] = rows[order]
    return out


def last_per_user(user: np.ndarray, keep: int) -> np.ndarray:
    """A mask of each user's last ``keep`` positions (``user`` sorted)."""
    n = len(user)
    last = np.r_[user[1:] != user[:-1], True]
    user_end = np.minimum.accumulate(np.where(last, np.arange(n), n)[::-1])[::-1]
    return np.arange(n) > user_end - keep

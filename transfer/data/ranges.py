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

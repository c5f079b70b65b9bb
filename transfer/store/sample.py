"""A bounded sample of a store's embeddings: what a model fitted on them (the LoopFM compressor)
reads instead of the whole day range (DESIGN §5)."""

from __future__ import annotations

import numpy as np

from gemkd.transfer.errors import StoreError
from gemkd.transfer.store.store_reader import TeacherStore


def sample_embeddings(store: TeacherStore, days: tuple[int, int] | None, max_rows: int,
                      seed: int) -> np.ndarray:
    """The ``[n, E] float32`` embeddings of ``days``, all of them (in :meth:`TeacherStore.read`
    order, the very array a whole read gives) when they are at most ``max_rows``, else
    ``max_rows`` of them drawn uniformly without replacement (seeded), in store order.

    Memory: the returned array and one row group, never the day range.

    Raises:
        ValueError: ``max_rows`` < 1.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    cols = store.emb_columns
    sizes = [t.num_rows for t in store.iter_row_groups(days, ["day"])]
    n = sum(sizes)
    e = store.emb_dim
    if n <= max_rows:
        out = np.empty((n, e), dtype=np.float32)
        keep = None
    else:
        out = np.empty((max_rows, e), dtype=np.float32)
        keep = np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))
    start = at = 0
    for table in store.iter_row_groups(days, cols):
        m = table.num_rows
        if keep is None:
            out[at:at + m] = store.embeddings(table)
            at += m
        else:
            lo, hi = np.searchsorted(keep, [start, start + m])
            if hi > lo:
                out[at:at + hi - lo] = store.embeddings(table.take(keep[lo:hi] - start))
                at += hi - lo
        start += m
    if at != len(out):  # the store changed between the two passes
        raise StoreError(f"{store.path}: read {start} rows of days {days}, counted {n} first")
    return out

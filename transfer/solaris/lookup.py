"""A served row's pair representation: the precomputed vector of its (day, user, item), or on a
miss a declared fallback, with a miss flag (1) the student can learn to discount.

Fallbacks: ``user_mean`` (the mean of the user's precomputed vectors of that day: the teacher's
view of this user over the items the policy predicted), ``item_mean`` (the item's, over the users
it was precomputed for that day), ``zero``. A mean with nothing to average is zeros.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

FALLBACKS = ("user_mean", "item_mean", "zero")


def _index(*cols: np.ndarray) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([np.asarray(c, dtype=np.int64) for c in cols])


def _group_means(keys: list[np.ndarray], vectors: np.ndarray) -> tuple[pd.MultiIndex, np.ndarray]:
    frame = pd.DataFrame(vectors)
    frame.index = _index(*keys)
    means = frame.groupby(level=list(range(len(keys)))).mean()
    return means.index, means.to_numpy(dtype=np.float32)


class PairLookup:
    """``lookup(day, user_id, item)`` → ``[B, dim + 1]`` float32: the vector (or its fallback)
    and the miss flag in the last column. Indexed once (pandas MultiIndex: one vectorised
    ``get_indexer`` per batch)."""

    def __init__(self, day: np.ndarray, user_id: np.ndarray, item: np.ndarray,
                 vectors: np.ndarray, fallback: str = "user_mean") -> None:
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback {fallback!r}: expected one of {', '.join(FALLBACKS)}")
        self.fallback = fallback
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim = int(self.vectors.shape[1])
        self._pairs = _index(day, user_id, item)
        if not self._pairs.is_unique:
            raise ValueError("a (day, user_id, item) pair appears twice in the pair store")
        #: what the lookup was read from (a store's file, sha256 and the fallback), so two
        #: lookups of one store compare equal and a pack's members can share one
        self.source: tuple[str, str, str] | None = None
        self._fb_index: pd.MultiIndex | None = None
        self._fb: np.ndarray | None = None
        if fallback == "user_mean":
            self._fb_index, self._fb = _group_means([day, user_id], self.vectors)
        elif fallback == "item_mean":
            self._fb_index, self._fb = _group_means([day, item], self.vectors)

    @classmethod
    def from_store(cls, store, fallback: str = "user_mean") -> PairLookup:
        """From a :class:`~gemkd.transfer.solaris.PairStore`."""
        day, user_id, item, vectors = store.read()
        lookup = cls(day, user_id, item, vectors, fallback=fallback)
        lookup.source = (str(store.file), str(store.info["sha256"]), fallback)
        return lookup

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PairLookup) or self.source is None:
            return False
        return self.source == other.source

    def __hash__(self) -> int:
        return hash(self.source) if self.source is not None else id(self)

    def lookup(self, day, user_id, item) -> torch.Tensor:
        """The rows' features ``[B, dim + 1]`` (a CPU tensor): hit → vector, 0; miss →
        fallback, 1."""
        d, u, i = (np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x,
                              dtype=np.int64) for x in (day, user_id, item))
        at = self._pairs.get_indexer(_index(d, u, i))
        hit = at >= 0
        out = np.zeros((len(d), self.dim + 1), dtype=np.float32)
        out[hit, :self.dim] = self.vectors[at[hit]]
        miss = ~hit
        out[miss, self.dim] = 1.0
        if miss.any() and self._fb is not None and self._fb_index is not None:
            second = u if self.fallback == "user_mean" else i
            fb_at = self._fb_index.get_indexer(_index(d[miss], second[miss]))
            found = fb_at >= 0
            rows = np.flatnonzero(miss)[found]
            out[rows, :self.dim] = self._fb[fb_at[found]]
        return torch.from_numpy(out)

"""Join training batches to teacher outputs by ``example_id`` (DESIGN §4).

The store rows of one day range are read once and indexed by example_id: a direct-address table
when the ids are dense (row numbers, as both data sources write them), else a sorted copy for
``np.searchsorted``; each batch is then one vectorised lookup plus gathers — no Python loop over
rows, no per-batch DataFrame merge. Missing teacher rows follow the configured policy:
``"error"`` refuses the batch, ``"mask"`` returns a ``found`` mask so callers skip the KD loss on
those rows. ``coverage`` (found / requested, cumulative) is what a run reports.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.errors import StoreError
from gemkd.transfer.io.integrity import int_ids
from gemkd.transfer.options import JOIN_POLICIES, JoinPolicy
from gemkd.transfer.store.store_reader import TeacherStore

_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


@dataclass
class JoinResult:
    """Teacher outputs aligned with the requested rows; rows not found hold zeros."""

    logits: np.ndarray  # [B, T] float32
    found: np.ndarray  # [B] bool
    emb: np.ndarray | None = None  # [B, E] float32 when requested


class TeacherJoin:
    """A sorted example_id index over one day range of a store.

    Build one per day range (the index costs one read and one sort); call it per batch;
    :meth:`fresh` shares a built one with the next consumer.
    ``with_emb`` keeps the embeddings (in their stored dtype, de-quantised per batch).
    """

    def __init__(self, store: TeacherStore, days: tuple[int, int] | None = None,
                 policy: JoinPolicy = "error", with_emb: bool = False) -> None:
        if policy not in JOIN_POLICIES:
            raise StoreError(f"{store.path}: join policy {policy!r}, expected 'error' or 'mask'")
        self.store, self.days, self.policy, self.with_emb = store, days, policy, with_emb
        columns = ["example_id", *store.logit_columns]
        if with_emb:
            columns += store.emb_columns
        table = store.read(days, columns)
        ids = table.column("example_id").to_numpy()
        self._n = len(ids)
        self._build_index(ids)
        self._logits = store.logits(table)  # in read order: the index maps ids to rows
        self._emb: np.ndarray | None = None  # with_emb: [rows, emb_dim] as stored
        self._scale: np.ndarray | None = None  # int8: each row's scale
        if with_emb:
            col = table.column("emb").combine_chunks()
            self._emb = col.flatten().to_numpy().reshape(len(ids), store.emb_dim)
            if store.manifest.emb_dtype == "int8":
                self._scale = table.column("emb_scale").to_numpy()
        self.requested = 0
        self.found = 0

    def fresh(self) -> TeacherJoin:
        """This join's index and outputs (shared, read-only) with its own ``coverage`` counts:
        what the next student of a sweep uses instead of reading and indexing the store again."""
        other = copy.copy(self)
        other.requested = other.found = 0
        return other

    def _build_index(self, ids: np.ndarray) -> None:
        """Dense ids (the usual case: row numbers of a dataset) get a direct-address table,
        one gather per lookup; sparse ids a sorted copy and binary search."""
        self._dense = None
        self._lo = int(ids.min()) if len(ids) else 0
        span = int(ids.max()) - self._lo + 1 if len(ids) else 0
        if len(ids) and span <= 4 * len(ids) + 4096:
            table = np.full(span, -1, dtype=np.int64)
            table[ids - self._lo] = np.arange(len(ids))
            if np.count_nonzero(table >= 0) != len(ids):
                self._refuse_duplicates(ids)
            self._dense = table
            return
        self._order = np.argsort(ids)
        self._ids = ids[self._order]
        if len(ids) > 1 and (self._ids[1:] == self._ids[:-1]).any():
            self._refuse_duplicates(ids)

    def _refuse_duplicates(self, ids: np.ndarray) -> None:
        s = np.sort(ids)
        dup = int(s[1:][s[1:] == s[:-1]][0])
        raise StoreError(f"{self.store.path}: example_id {dup} appears more than once; the "
                         f"store was not deduplicated")

    def _rows_of(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row (in read order) of each requested id, and whether it was found (row 0 if not)."""
        if self._n == 0:
            return np.zeros(len(q), dtype=np.intp), np.zeros(len(q), dtype=bool)
        if self._dense is not None:
            inside = (q >= self._lo) & (q <= self._lo + (len(self._dense) - 1))
            rows = np.take(self._dense, np.where(inside, q - self._lo, 0))
            found = inside & (rows >= 0)
            return np.where(found, rows, 0), found
        # binary search with sorted keys: numpy narrows each search with the previous hit,
        # ~2x faster than random keys on a large index
        qo = np.argsort(q)
        pos = np.empty(len(q), dtype=np.intp)
        pos[qo] = np.searchsorted(self._ids, q[qo])
        np.minimum(pos, self._n - 1, out=pos)
        found = self._ids[pos] == q
        return np.take(self._order, pos), found

    def __len__(self) -> int:
        return self._n

    @property
    def coverage(self) -> float:
        """Share of requested rows that found a teacher row so far (1.0 before any request)."""
        return self.found / self.requested if self.requested else 1.0

    def _where(self) -> str:
        d = "all days" if self.days is None else f"days [{self.days[0]}, {self.days[1]})"
        return f"{self.store.path} ({d})"

    def __call__(self, rows: Batch | np.ndarray | torch.Tensor) -> JoinResult:
        """Look up a Batch (by its ``example_id``) or an int64 example_id array ``[B]``."""
        if isinstance(rows, Batch):
            rows = rows.example_id
        q = int_ids("example_id", rows, self._where())
        rows, found = self._rows_of(q)
        n_found = int(found.sum())
        self.requested += len(q)
        self.found += n_found
        complete = n_found == len(q)
        if not complete and self.policy == "error":
            missing = int(q[np.argmin(found)])
            raise StoreError(
                f"{self._where()}: example_id {missing} has no teacher row ({len(q) - n_found} "
                f"of {len(q)} in this batch missing; coverage so far {self.coverage:.4%} of "
                f"{self.requested} rows); use policy 'mask' to train those rows without KD")
        if self._n:
            logits = np.take(self._logits, rows, axis=0)  # ~10x faster than fancy indexing
        else:
            logits = np.zeros((len(q), len(self.store.tasks)), dtype=np.float32)
        if not complete:
            logits[~found] = 0.0
        emb = None
        if self._emb is not None:  # with_emb
            if self._n:
                codes = np.take(self._emb, rows, axis=0)
                if self._scale is None:  # float16 → float32 through a 65536-entry table:
                    emb = np.take(_F16_TO_F32, codes.view(np.uint16))  # 2x numpy's astype
                else:
                    emb = codes.astype(np.float32)
                    emb *= np.take(self._scale, rows)[:, None]
            else:
                emb = np.zeros((len(q), self.store.emb_dim), dtype=np.float32)
            if not complete:
                emb[~found] = 0.0
        return JoinResult(logits=logits, found=found, emb=emb)

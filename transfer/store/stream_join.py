"""Join a student's batches to a store row group by row group, in bounded memory (DESIGN §4).

:class:`TeacherJoin` reads its whole day range and indexes it: memory grows with the store. A
student reads its own days and domain in time order, and a store is written in example order (a
rank's shards follow the reader's row groups), so a batch's ids fall in one or a few of the
store's row groups. :class:`StreamJoin` keeps only the row groups recent batches touched: each
row group's ``example_id`` range comes from the Parquet footer (statistics, else one read of the
key columns), the groups outside the student's days and domains are dropped up front, and a batch
loads (and indexes) the groups whose range overlaps its ids, keeping at most ``cache_groups`` of
them. A time-ordered pass reads every scoped row group once. The answers are the same values as
:class:`TeacherJoin`'s over the same days, bit for bit, for every id inside the scope; ids outside
it (another day or domain) are not found.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.io.integrity import int_ids
from gemkd.transfer.options import JoinPolicy
from gemkd.transfer.store.join import _F16_TO_F32, JoinResult
from gemkd.transfer.store.store_reader import TeacherStore


@dataclass
class _Block:
    """One scoped row group, indexed: ``rows_of`` maps ids to its rows."""

    lo: int
    dense: np.ndarray | None  # direct-address table over [lo, lo + len) or None
    order: np.ndarray | None  # sorted case: argsort of ids
    ids: np.ndarray  # sorted ids (sorted case) or the ids (dense case)
    logits: np.ndarray  # [n, T] float32
    emb: np.ndarray | None  # [n, E] as stored
    scale: np.ndarray | None  # int8 stores: [n]

    def rows_of(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.ids)
        if n == 0:
            return np.zeros(len(q), dtype=np.intp), np.zeros(len(q), dtype=bool)
        if self.dense is not None:
            inside = (q >= self.lo) & (q <= self.lo + (len(self.dense) - 1))
            rows = np.take(self.dense, np.where(inside, q - self.lo, 0))
            found = inside & (rows >= 0)
            return np.where(found, rows, 0), found
        assert self.order is not None
        pos = np.minimum(np.searchsorted(self.ids, q), n - 1)
        return np.take(self.order, pos), self.ids[pos] == q


class StreamJoin:
    """A store's rows of ``days`` (half-open, None: all) and ``domains`` (indices, None: all),
    looked up per batch through a small cache of indexed row groups.

    Same call and ``coverage`` as :class:`TeacherJoin`; ``fresh()`` shares the row-group table
    and the cache (a sweep's students, a pack's members) with its own coverage counts.
    ``cache_groups``: the row groups kept between batches (a batch that needs more loads them
    all for itself).
    """

    def __init__(self, store: TeacherStore, days: tuple[int, int] | None = None,
                 domains: Sequence[int] | None = None, policy: JoinPolicy = "error",
                 with_emb: bool = False, cache_groups: int = 4) -> None:
        if policy not in ("error", "mask"):
            raise StoreError(f"{store.path}: join policy {policy!r}, expected 'error' or 'mask'")
        if cache_groups < 1:
            raise StoreError(f"{store.path}: cache_groups must be >= 1, got {cache_groups}")
        self.store, self.days, self.policy, self.with_emb = store, days, policy, with_emb
        self.domains = None if domains is None else sorted({int(d) for d in domains})
        self.cache_groups = cache_groups
        self._columns = ["example_id", "day", "domain", *store.logit_columns]
        if with_emb:
            self._columns += store.emb_columns
        self._files = [fs.join(store.path, s.file) for s in store.shards_for(days)]
        self._scan_groups()
        self._cache: OrderedDict[int, _Block] = OrderedDict()  # shared by fresh() copies
        self._open: dict[int, pq.ParquetFile] = {}
        self.requested = 0
        self.found = 0
        self.loads = 0  # row groups this copy read (a measure of re-reads)

    # ---- the row-group table ----------------------------------------------------------------
    def _scan_groups(self) -> None:
        """Each scoped row group's file, index and example_id range, sorted by range start."""
        file_of, group, lo, hi, rows = [], [], [], [], []
        for f, path in enumerate(self._files):
            meta = pq.read_metadata(fs.open_input(path))
            names = meta.schema.to_arrow_schema().names
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                if rg.num_rows == 0:
                    continue
                keys = ("example_id", "day", "domain")
                stats = [_stat_range(rg, names.index(c)) for c in keys]
                rng: dict[str, tuple[int, int]] = {}
                if all(r is not None for r in stats):
                    rng = {c: r for c, r in zip(keys, stats, strict=True) if r is not None}
                else:  # no statistics: read the keys
                    t = pq.ParquetFile(fs.open_input(path)).read_row_group(g, columns=list(keys))
                    rng = {c: (int(pc.min(t[c]).as_py()), int(pc.max(t[c]).as_py()))
                           for c in keys}
                d, m = rng["day"], rng["domain"]
                if self.days is not None and (d[1] < self.days[0] or d[0] >= self.days[1]):
                    continue
                if self.domains is not None and not any(m[0] <= x <= m[1]
                                                        for x in self.domains):
                    continue
                file_of.append(f)
                group.append(g)
                lo.append(rng["example_id"][0])
                hi.append(rng["example_id"][1])
                rows.append(rg.num_rows)
        order = np.argsort(np.asarray(lo, dtype=np.int64), kind="stable")
        self._g_file = np.asarray(file_of, dtype=np.int64)[order]
        self._g_group = np.asarray(group, dtype=np.int64)[order]
        self._g_lo = np.asarray(lo, dtype=np.int64)[order]
        self._g_hi = np.asarray(hi, dtype=np.int64)[order]
        self._g_rows = np.asarray(rows, dtype=np.int64)[order]

    @property
    def num_groups(self) -> int:
        """Row groups inside the scope (an upper bound on what a pass reads)."""
        return len(self._g_lo)

    def __len__(self) -> int:
        """Rows of the scoped row groups (before the day and domain filter inside a group)."""
        return int(self._g_rows.sum())

    def fresh(self) -> StreamJoin:
        """This join's row-group table and cache (shared) with its own ``coverage`` counts."""
        other = self._shared()
        other.requested = other.found = other.loads = 0
        return other

    def _shared(self) -> StreamJoin:
        """A shallow copy: the same row-group table, cache and open files (``copy.copy`` would
        go through :meth:`__getstate__`, which drops them)."""
        other = object.__new__(StreamJoin)
        other.__dict__.update(self.__dict__)
        return other

    def __deepcopy__(self, memo: dict) -> StreamJoin:
        """A copy that shares the row-group table, the cache and the open files (all read-only
        here), with the counts as they are: a module holding the join is deep-copied whole (a
        weight average's model), and an open Parquet file cannot be copied."""
        other = self._shared()
        memo[id(self)] = other
        return other

    def __getstate__(self) -> dict:
        """Pickled without the cache and the open files (another process reads its own)."""
        state = dict(self.__dict__)
        state["_cache"], state["_open"] = OrderedDict(), {}
        return state

    def release(self) -> None:
        """Drop the cached row groups and open files (of every copy: they share them); the next
        call reads what it needs again."""
        self._cache.clear()
        self._open.clear()

    @property
    def coverage(self) -> float:
        """Share of requested rows that found a teacher row so far (1.0 before any request)."""
        return self.found / self.requested if self.requested else 1.0

    def _where(self) -> str:
        d = "all days" if self.days is None else f"days [{self.days[0]}, {self.days[1]})"
        if self.domains is not None:
            d += f", domains {self.domains}"
        return f"{self.store.path} ({d})"

    # ---- loading -----------------------------------------------------------------------------
    def _block(self, k: int) -> _Block:
        """Row group ``k`` of the table, read, filtered to the scope, checked and indexed."""
        if k in self._cache:
            self._cache.move_to_end(k)
            return self._cache[k]
        f = int(self._g_file[k])
        if f not in self._open:
            self._open[f] = pq.ParquetFile(fs.open_input(self._files[f]))
        table = self._open[f].read_row_group(int(self._g_group[k]), columns=self._columns)
        table = self._scoped(table)
        self.store.check_values(table, self._columns[3:], self.days)
        ids = table.column("example_id").to_numpy()
        block = _index(ids, self.store.logits(table), str(self.store.path))
        if self.with_emb:
            n = table.num_rows
            col = table.column("emb").combine_chunks()
            block.emb = col.flatten().to_numpy().reshape(n, self.store.emb_dim)
            if self.store.manifest.emb_dtype == "int8":
                block.scale = table.column("emb_scale").to_numpy()
        self.loads += 1
        self._cache[k] = block
        return block

    def _scoped(self, table: pa.Table) -> pa.Table:
        mask = None
        if self.days is not None:
            mask = pc.and_(pc.greater_equal(table["day"], self.days[0]),
                           pc.less(table["day"], self.days[1]))
        if self.domains is not None:
            dm = pc.is_in(table["domain"], pa.array(self.domains, pa.int16()))
            mask = dm if mask is None else pc.and_(mask, dm)
        return table if mask is None else table.filter(mask)

    def _evict(self, keep: set[int]) -> None:
        while len(self._cache) > max(self.cache_groups, len(keep)):
            for k in self._cache:
                if k not in keep:
                    del self._cache[k]
                    break

    # ---- lookup ------------------------------------------------------------------------------
    def __call__(self, rows: Batch | np.ndarray | torch.Tensor) -> JoinResult:
        """Look up a Batch (by its ``example_id``) or an int64 example_id array ``[B]``."""
        if isinstance(rows, Batch):
            rows = rows.example_id
        q = int_ids("example_id", rows, self._where())
        n_tasks = len(self.store.tasks)
        logits = np.zeros((len(q), n_tasks), dtype=np.float32)
        emb = np.zeros((len(q), self.store.emb_dim), dtype=np.float32) if self.with_emb else None
        found = np.zeros(len(q), dtype=bool)
        if len(q) and self.num_groups:
            qmin, qmax = int(q.min()), int(q.max())
            end = int(np.searchsorted(self._g_lo, qmax, side="right"))
            need = np.flatnonzero(self._g_hi[:end] >= qmin).tolist()
            for k in need:
                self._fill(self._block(k), q, logits, emb, found)
            self._evict(set(need))
        n_found = int(found.sum())
        self.requested += len(q)
        self.found += n_found
        if n_found != len(q) and self.policy == "error":
            missing = int(q[np.argmin(found)])
            raise StoreError(
                f"{self._where()}: example_id {missing} has no teacher row ({len(q) - n_found} "
                f"of {len(q)} in this batch missing; coverage so far {self.coverage:.4%} of "
                f"{self.requested} rows); use policy 'mask' to train those rows without KD")
        return JoinResult(logits=logits, found=found, emb=emb)

    def _fill(self, block: _Block, q: np.ndarray, logits: np.ndarray, emb: np.ndarray | None,
              found: np.ndarray) -> None:
        rows, hit = block.rows_of(q)
        if not hit.any():
            return
        if (hit & found).any():
            dup = int(q[np.argmax(hit & found)])
            raise StoreError(f"{self.store.path}: example_id {dup} appears more than once; "
                             f"the store was not deduplicated")
        found |= hit
        at, src = np.flatnonzero(hit), rows[hit]
        logits[at] = np.take(block.logits, src, axis=0)
        if emb is not None and block.emb is not None:
            codes = np.take(block.emb, src, axis=0)
            if block.scale is None:  # float16 → float32 as TeacherJoin does
                emb[at] = np.take(_F16_TO_F32, codes.view(np.uint16))
            else:
                part = codes.astype(np.float32)
                part *= np.take(block.scale, src)[:, None]
                emb[at] = part


def _stat_range(rg: pq.RowGroupMetaData, i: int) -> tuple[int, int] | None:
    st = rg.column(i).statistics
    if st is None or not st.has_min_max:
        return None
    return int(st.min), int(st.max)


def _index(ids: np.ndarray, logits: np.ndarray, where: str) -> _Block:
    """Dense ids get a direct-address table, sparse ones a sorted copy (as TeacherJoin)."""
    n = len(ids)
    if n == 0:
        return _Block(0, None, None, ids, logits, None, None)
    lo = int(ids.min())
    span = int(ids.max()) - lo + 1
    if span <= 4 * n + 4096:
        table = np.full(span, -1, dtype=np.int64)
        table[ids - lo] = np.arange(n)
        if np.count_nonzero(table >= 0) != n:
            _refuse_duplicates(ids, where)
        return _Block(lo, table, None, ids, logits, None, None)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    if n > 1 and (s[1:] == s[:-1]).any():
        _refuse_duplicates(ids, where)
    return _Block(lo, None, order, s, logits, None, None)


def _refuse_duplicates(ids: np.ndarray, where: str) -> None:
    s = np.sort(ids)
    dup = int(s[1:][s[1:] == s[:-1]][0])
    raise StoreError(f"{where}: example_id {dup} appears more than once in one row group; "
                     f"the store was not deduplicated")

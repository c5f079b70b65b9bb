"""A code store written from codes that arrive a chunk at a time, in bounded memory (DESIGN §5,
LoopFM).

The code file is sorted by ``(user_id, ts, example_id)`` while a teacher store's row groups come
in export order, so the whole store's keys and codes would have to be held to sort them (~80 B
a row at the write's peak). Instead this is an external distribution sort: the chunks are
spilled to disk as they come (Arrow IPC streams beside the output), then split by user-id range
into buckets of at most ``bucket_rows`` rows — equal-width ranges, a bucket still too large
split again by its own range, one user's rows by time range — and the buckets, each sorted in
memory, are written in order. A (user, second) never straddles buckets, so the buckets' sorted
rows in order are the whole sort: the file has the bytes
:func:`gemkd.transfer.repr_features.codes.write_code_store` writes for the same rows (row groups
of ``row_group_size`` rows cut across buckets). Memory: one bucket
and one row group of the output, whatever the store's length (only a single user's rows of a
single second are never split). Disk: the spill, ~30 B a row (written once more by each
level of splitting).

A merge of sorted runs (one per store row group) was the alternative; its memory grows with the
number of runs (a buffer per run), and its merge is a Python loop or a re-sort per step, where
a bucket here is one ``np.lexsort``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.io.publish import output_directory
from gemkd.transfer.repr_features.codes import (
    CODES_FILE,
    CODES_JSON,
    PARQUET_OPTIONS,
    ROW_GROUP_ROWS,
    check_code_args,
    check_code_rows,
    code_nbytes,
    code_schema,
    sorted_code_table,
    write_code_info,
)

#: rows a bucket holds at most before it is split (~30 B a row kept, ~5x that while sorting):
#: with the output's row group (2^20 rows) pending beside it, a write's peak was flat from 4M to
#: 8M rows at 2^18 (at 2^20 it still rose ~11 B a row: the allocator's leftovers of larger sorts)
BUCKET_ROWS = 1 << 18
#: the most buckets one split makes (files open at once): 1B rows take two levels
MAX_FANOUT = 256

Chunk = tuple[Any, Any, Any, Any, Any]  # (example_id, user_id, ts, day, codes_q)


@dataclass
class _Spill:
    """Rows spilled to one Arrow IPC stream: where, how many, their user-id and time ranges."""

    path: Path
    rows: int = 0
    lo: int = 0
    hi: int = -1
    t_lo: int = 0
    t_hi: int = -1

    def add(self, uid: np.ndarray, ts: np.ndarray) -> None:
        if len(uid):
            lo, hi, t_lo, t_hi = int(uid.min()), int(uid.max()), int(ts.min()), int(ts.max())
            if self.rows:
                lo, hi = min(self.lo, lo), max(self.hi, hi)
                t_lo, t_hi = min(self.t_lo, t_lo), max(self.t_hi, t_hi)
            self.lo, self.hi, self.t_lo, self.t_hi = lo, hi, t_lo, t_hi
            self.rows += len(uid)

    def splittable(self) -> bool:
        """More than one user, or one user over more than one second."""
        return self.lo < self.hi or self.t_lo < self.t_hi


def write_code_store_streamed(out: str | Path, chunks: Iterable[Chunk], bits: int,
                              code_dim: int, meta: dict[str, Any], overwrite: bool = False,
                              bucket_rows: int = BUCKET_ROWS,
                              row_group_size: int = ROW_GROUP_ROWS) -> fs.Where:
    """Write the code store of ``chunks`` to ``out`` atomically, in bounded memory.

    Parameters
    ----------
    out
        The code store directory (a path or an s3:// URI).
    chunks
        ``(example_id, user_id, ts, day, codes_q)`` arrays, any number of rows each, in any
        order (a store's row groups as they are encoded).
    bits, code_dim, meta, overwrite
        As :func:`gemkd.transfer.repr_features.codes.write_code_store`.
    bucket_rows
        The most rows sorted in memory at once (one user's rows of one second excepted).
    row_group_size
        Rows per row group of the code file.

    Returns
    -------
    The store's location; its files equal ``write_code_store``'s for the same rows.

    Raises
    ------
    StoreError
        Bad arguments or arrays (named), or an ``example_id`` repeated within a user: nothing
        is written. Ids are unique across users in any teacher store (its export drops repeats).
    """
    out = fs.as_where(out)
    check_code_args(out, bits, code_dim, meta)
    if bucket_rows < 1 or row_group_size < 1:
        raise StoreError(f"{out}: bucket_rows and row_group_size must be >= 1, got "
                         f"{bucket_rows} and {row_group_size}")
    schema = code_schema(code_nbytes(bits, code_dim))
    with output_directory(out, overwrite=overwrite, last=(CODES_JSON,)) as tmp:
        with tempfile.TemporaryDirectory(dir=tmp, prefix=".spill-") as scratch:
            spill = _Spill(Path(scratch) / "in.arrow")
            with pa.ipc.new_stream(spill.path, schema) as w:
                for chunk in chunks:
                    eid, uid, t, d, q = check_code_rows(out, *chunk, bits, code_dim)
                    if len(eid):
                        w.write_table(_table(eid, uid, t, d, q, schema))
                        spill.add(uid, t)
            rows = 0
            with pq.ParquetWriter(tmp / CODES_FILE, schema, **PARQUET_OPTIONS) as writer:
                for table in _row_groups(_sorted_buckets(out, spill, bucket_rows, schema),
                                         row_group_size):
                    writer.write_table(table, row_group_size=row_group_size)
                    rows += table.num_rows
                if rows == 0:  # as write_table of no rows: one empty row group
                    writer.write_table(schema.empty_table())
        write_code_info(tmp, bits, code_dim, rows, meta)
    return out


def _table(eid: np.ndarray, uid: np.ndarray, t: np.ndarray, d: np.ndarray, q: np.ndarray,
           schema: pa.Schema) -> pa.Table:
    m, nbytes = q.shape
    code = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(nbytes), m, [None, pa.py_buffer(np.ascontiguousarray(q).view(np.uint8))])
    return pa.Table.from_arrays([pa.array(eid), pa.array(uid), pa.array(t),
                                 pa.array(d.astype(np.int32)), code], schema=schema)


def _sorted_buckets(out: fs.Where, spill: _Spill, bucket_rows: int, schema: pa.Schema
                    ) -> Iterator[pa.Table]:
    """The spill's rows sorted by ``(user_id, ts, example_id)``, a bucket at a time in user
    order; each spill file is removed once read."""
    if spill.rows == 0:
        spill.path.unlink()
        return
    if spill.rows <= bucket_rows or not spill.splittable():
        with pa.OSFile(str(spill.path)) as source:
            table = pa.ipc.open_stream(source).read_all()
        spill.path.unlink()
        cols = {k: table.column(k).to_numpy() for k in ("example_id", "user_id", "ts", "day")}
        q = _code_bytes(table)
        del table
        eid = cols["example_id"]
        if len(eid) > 1 and np.unique(eid).size != len(eid):
            raise StoreError(f"{out}: example_id has duplicates")
        yield sorted_code_table(eid, cols["user_id"], cols["ts"], cols["day"], q)
        return
    for part in _split(spill, bucket_rows, schema):
        yield from _sorted_buckets(out, part, bucket_rows, schema)


def _split(spill: _Spill, bucket_rows: int, schema: pa.Schema) -> list[_Spill]:
    """Split a spill into files in sort order, removing it: by equal-width user-id ranges, or,
    for one user's rows, by equal-width time ranges (a user with more than a bucket's rows).
    Ranges are taken as unsigned offsets from the lowest value, so any int64 span is exact."""
    by_user = spill.lo < spill.hi
    column, first, last = (1, spill.lo, spill.hi) if by_user else (2, spill.t_lo, spill.t_hi)
    k = int(min(MAX_FANOUT, max(2, -(-spill.rows // bucket_rows))))
    width = np.uint64((last - first) // k + 1)
    lo = np.int64(first).view(np.uint64)
    parts = [_Spill(spill.path.with_name(f"{spill.path.stem}.{i}.arrow")) for i in range(k)]
    writers = [pa.ipc.new_stream(p.path, schema) for p in parts]
    try:
        with pa.OSFile(str(spill.path)) as source:
            for batch in pa.ipc.open_stream(source):
                uid, ts = batch.column(1).to_numpy(), batch.column(2).to_numpy()
                key = batch.column(column).to_numpy()
                which = (key.view(np.uint64) - lo) // width
                order = np.argsort(which, kind="stable")
                cuts = np.searchsorted(which[order], np.arange(k + 1, dtype=np.uint64))
                for i in np.flatnonzero(np.diff(cuts)).tolist():
                    rows = order[cuts[i]:cuts[i + 1]]
                    writers[i].write_batch(batch.take(pa.array(rows)))
                    parts[i].add(uid[rows], ts[rows])
    finally:
        for w in writers:
            w.close()
    spill.path.unlink()
    return parts


def _code_bytes(table: pa.Table) -> np.ndarray:
    col = table.column("code").combine_chunks()
    nbytes = col.type.byte_width
    flat = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=len(col) * nbytes,
                         offset=col.offset * nbytes)
    return flat.reshape(len(col), nbytes)


def _row_groups(tables: Iterable[pa.Table], size: int) -> Iterator[pa.Table]:
    """Re-cut a stream of tables into tables of exactly ``size`` rows (the last: the rest)."""
    pending: list[pa.Table] = []
    held = 0
    for table in tables:
        pending.append(table)
        held += table.num_rows
        while held >= size:
            whole = pa.concat_tables(pending)
            yield whole.slice(0, size).combine_chunks()
            rest = whole.slice(size)
            pending, held = [rest], rest.num_rows
    if held:
        yield pa.concat_tables(pending).combine_chunks()

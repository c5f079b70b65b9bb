"""Write a teacher-output store: Parquet shards per rank, deduplicated, manifest last (DESIGN §4).

Crash safety, single process: rank 0 builds the whole store inside ``atomic_directory`` (a hidden
temporary sibling of ``out_dir``) and renames it into place in ``finalize()``; a crash anywhere
before that leaves no directory at ``out_dir``.

Multi-rank: rank 0 creates the staging directory the same way and shares its path
(``writer.staging_dir``, broadcast by the caller: ``StoreCallback`` uses
``trainer.strategy.broadcast``); every other rank is built with ``staging_dir=<that path>`` and
writes its own ``part-r<rank>-*.parquet`` shards there (so the directory must be on a filesystem
all ranks share). Each rank ``close()``s its writer, which writes a small ``_rank-r<rank>.json``
marker listing its shards; after a barrier, rank 0 ``finalize()``s: it refuses if any rank's
marker is missing, removes duplicated example_ids, writes ``manifest.json`` last and renames the
directory into place. If any rank dies, the marker is missing, rank 0 refuses, and the staging
directory is removed (or, if rank 0 itself was killed, left as a hidden ``.<name>.tmp-*`` sibling,
never at ``out_dir``).

Every shard is written under a hidden temporary name and renamed when complete; memory is bounded
by one row group (``row_group_rows``), never by the size of the export.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.io.atomic import atomic_write_bytes
from gemkd.transfer.io.integrity import sha256_file
from gemkd.transfer.io.publish import output_directory
from gemkd.transfer.options import EMB_DTYPES, EmbDtype
from gemkd.transfer.store.dedupe import dedupe_shards
from gemkd.transfer.store.format import (
    KEY_COLUMNS,
    ROW_ARRAYS,
    parquet_options,
    quantize_int8,
    rank_marker,
    shard_name,
    store_schema,
    to_float16,
    to_numpy,
)
from gemkd.transfer.store.manifest import MANIFEST_NAME, Manifest, ShardInfo

__all__ = ["StoreWriter", "dedupe_shards", "parquet_options", "quantize_int8", "store_schema",
           "to_float16"]

class StoreWriter:
    """Accept per-batch teacher outputs of one rank and write them as Parquet shards.

    ``write()`` takes ``example_id, day, domain, user_id, ts [B]`` (int), ``logits [B, T]`` and
    ``emb [B, E]`` (float; numpy or CPU/GPU tensors). Rows are buffered up to ``row_group_rows``,
    written as row groups, and a shard is closed (and renamed into place) every
    ``rows_per_shard`` rows. Usable as a context manager: a clean exit finalizes a single-process
    store (``close()`` only, for ``world_size > 1``), an exception aborts it.
    ``check_finite=False`` lets non-finite outputs through (the reader will then refuse the
    store); it exists to reproduce bad stores, not for exports.
    """

    def __init__(self, out_dir: str | Path, tasks: list[str], layer: str, emb_dim: int,
                 emb_dtype: str, teacher_name: str, teacher_version: str,
                 trained_until_day: int, rank: int = 0, world_size: int = 1,
                 rows_per_shard: int = 1 << 20, row_group_rows: int = 1 << 16,
                 staging_dir: str | Path | None = None, overwrite: bool = False,
                 extra: dict[str, Any] | None = None, check_finite: bool = True) -> None:
        if emb_dtype not in EMB_DTYPES:
            raise StoreError(f"{out_dir}: emb_dtype {emb_dtype!r} not in {list(EMB_DTYPES)}")
        if not tasks or len(set(tasks)) != len(tasks):
            raise StoreError(f"{out_dir}: tasks must be non-empty and unique, got {tasks!r}")
        if emb_dim < 1 or rows_per_shard < 1 or row_group_rows < 1:
            raise StoreError(f"{out_dir}: emb_dim, rows_per_shard and row_group_rows must be "
                             f">= 1, got {emb_dim}, {rows_per_shard}, {row_group_rows}")
        if not 0 <= rank < world_size:
            raise StoreError(f"{out_dir}: rank {rank} outside world_size {world_size}")
        self.out_dir = fs.as_where(out_dir)
        self.tasks, self.layer = list(tasks), layer
        self.emb_dim = int(emb_dim)
        self.emb_dtype = cast(EmbDtype, emb_dtype)  # checked above
        self.teacher_name, self.teacher_version = teacher_name, teacher_version
        self.trained_until_day = int(trained_until_day)
        self.rank, self.world_size = rank, world_size
        self.rows_per_shard = rows_per_shard
        self.row_group_rows = min(row_group_rows, rows_per_shard)
        self.extra = dict(extra or {})
        self.check_finite = check_finite
        self.schema = store_schema(self.tasks, self.emb_dim, emb_dtype)
        self.parquet_options = parquet_options(emb_dtype)
        self._commit = None
        if rank == 0:
            if staging_dir is not None:
                raise StoreError(f"{out_dir}: rank 0 creates the staging directory itself; pass "
                                 f"staging_dir only to the other ranks")
            self._commit = output_directory(self.out_dir, overwrite=overwrite,
                                            last=(MANIFEST_NAME,))
            self.staging_dir = self._commit.__enter__()
        else:
            if staging_dir is None or not Path(staging_dir).is_dir():
                raise StoreError(f"{out_dir}: rank {rank} needs the staging directory rank 0 "
                                 f"created (writer.staging_dir), got {staging_dir}")
            self.staging_dir = Path(staging_dir)
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_rows = 0
        self._batches = 0
        self._shard_k = 0
        self._pq: pq.ParquetWriter | None = None
        self._shard_rows = 0
        self._shard_days: set[int] = set()
        self.shards: list[ShardInfo] = []
        self.rows_written = 0
        self.state = "open"  # open -> closed -> finalized | aborted

    # ---- writing ---------------------------------------------------------------------------
    def write(self, example_id: Any, day: Any, domain: Any, user_id: Any, ts: Any,
              logits: Any, emb: Any) -> None:
        """Buffer one batch; shapes and values are checked before anything is kept."""
        if self.state != "open":
            raise StoreError(f"{self.staging_dir}: rank {self.rank} writer is {self.state}")
        where = f"{self.out_dir}: rank {self.rank} batch {self._batches}"
        cols = {k: to_numpy(v) for k, v in zip(
            ROW_ARRAYS, (example_id, day, domain, user_id, ts), strict=True)}
        lg = to_numpy(logits)
        em = to_numpy(emb)
        b = cols["example_id"].shape[0] if cols["example_id"].ndim == 1 else -1
        for name, a in cols.items():
            if a.shape != (b,) or a.dtype.kind not in "iu":
                raise StoreError(f"{where}: {name} must be an integer array [B]; got "
                                 f"{a.dtype}{list(a.shape)} (example_id is {b} rows)")
        if lg.shape != (b, len(self.tasks)) or lg.dtype.kind != "f":
            raise StoreError(f"{where}: logits must be float [{b}, {len(self.tasks)}] (tasks "
                             f"{self.tasks}), got {lg.dtype}{list(lg.shape)}")
        if em.shape != (b, self.emb_dim) or em.dtype.kind != "f":
            raise StoreError(f"{where}: emb must be float [{b}, {self.emb_dim}], got "
                             f"{em.dtype}{list(em.shape)}")
        if b == 0:
            return
        for name, dtype in (("day", np.int32), ("domain", np.int16)):
            info = np.iinfo(dtype)
            lo, hi = int(cols[name].min()), int(cols[name].max())
            if lo < info.min or hi > info.max:
                raise StoreError(f"{where}: {name} values {lo}..{hi} do not fit {info.dtype}")
            cols[name] = cols[name].astype(dtype)
        for name in ("example_id", "user_id", "ts"):
            cols[name] = cols[name].astype(np.int64, copy=False)
        if self.check_finite:
            self._check_finite(where, "logits", lg, cols["example_id"])
            limit = float(np.finfo(np.float16 if self.emb_dtype == "float16" else np.float32).max)
            self._check_finite(where, "emb", em, cols["example_id"], limit)
        # casting and quantising wait for the row group: one large vectorised op, not one per
        # batch (small torch ops pay thread start-up on every call)
        cols["logits"] = lg.astype(np.float32, copy=False)
        cols["emb"] = em if em.dtype in (np.float16, np.float32) else em.astype(np.float32)
        self._pending.append(cols)
        self._pending_rows += b
        self._batches += 1
        if self._pending_rows >= self.row_group_rows:
            self._drain(final=False)

    @staticmethod
    def _check_finite(where: str, name: str, a: np.ndarray, ids: np.ndarray,
                      limit: float = float(np.finfo(np.float32).max)) -> None:
        ok = np.abs(a) <= limit  # False for NaN, inf and values that overflow the stored type
        if not ok.all():
            row = int(np.argmax(~ok.all(axis=1)))
            col = int(np.argmax(~ok[row]))
            value = a[row, col]
            if not np.isfinite(value):
                why = "the teacher produced non-finite outputs"
            elif limit == float(np.finfo(np.float16).max):
                why = f"beyond float16's range ±{limit:g}; export this layer as int8"
            else:
                why = f"beyond float32's range ±{limit:g}"
            raise StoreError(f"{where}: {name}[{row}, {col}] is {value} (example_id "
                             f"{int(ids[row])}); {why}")

    def _drain(self, final: bool) -> None:
        """Write full row groups (every pending row when ``final``), keep the remainder."""
        if not self._pending:
            return
        if len(self._pending) == 1:
            data = self._pending[0]
        else:
            data = {k: np.concatenate([p[k] for p in self._pending]) for k in self._pending[0]}
        n, start = self._pending_rows, 0
        while n - start >= self.row_group_rows or (final and start < n):
            take = min(self.row_group_rows, self.rows_per_shard - self._shard_rows, n - start)
            self._write_rows({k: v[start:start + take] for k, v in data.items()})
            start += take
        self._pending = [{k: v[start:] for k, v in data.items()}] if start < n else []
        self._pending_rows = n - start

    def _table(self, data: dict[str, np.ndarray]) -> pa.Table:
        arrays = [pa.array(data[k]) for k in KEY_COLUMNS]
        arrays += [pa.array(data["logits"][:, i]) for i in range(len(self.tasks))]
        if self.emb_dtype == "float16":
            codes, scale = to_float16(data["emb"]), None
        else:
            codes, scale = quantize_int8(data["emb"])
        arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(codes.reshape(-1)),
                                                        self.emb_dim))
        if scale is not None:
            arrays.append(pa.array(scale))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _tmp_path(self) -> Path:
        return self.staging_dir / f".{shard_name(self.rank, self._shard_k)}.tmp"

    def _write_rows(self, data: dict[str, np.ndarray]) -> None:
        if self._pq is None:
            self._pq = pq.ParquetWriter(self._tmp_path(), self.schema, **self.parquet_options)
        self._pq.write_table(self._table(data), row_group_size=len(data["example_id"]))
        self._shard_rows += len(data["example_id"])
        self._shard_days.update(np.unique(data["day"]).tolist())
        if self._shard_rows >= self.rows_per_shard:
            self._close_shard()

    def _close_shard(self) -> None:
        """Rename the finished shard into place and hash it while it is still in the page cache
        (so hashing is spread over ranks, not left to rank 0)."""
        if self._pq is None:
            return
        self._pq.close()
        self._pq = None
        name = shard_name(self.rank, self._shard_k)
        os.replace(self._tmp_path(), self.staging_dir / name)
        self.shards.append(ShardInfo(file=name, rows=self._shard_rows,
                                     sha256=sha256_file(self.staging_dir / name),
                                     days=sorted(int(d) for d in self._shard_days)))
        self.rows_written += self._shard_rows
        self._shard_k += 1
        self._shard_rows = 0
        self._shard_days = set()

    # ---- completion ------------------------------------------------------------------------
    def close(self) -> None:
        """Flush this rank's rows and write its done-marker; every rank calls this, then barrier."""
        if self.state != "open":
            return
        self._drain(final=True)
        self._close_shard()
        marker = {"rank": self.rank, "world_size": self.world_size, "rows": self.rows_written,
                  "shards": [asdict(s) for s in self.shards]}
        atomic_write_bytes(self.staging_dir / rank_marker(self.rank),
                           json.dumps(marker).encode())
        self.state = "closed"

    def finalize(self) -> Manifest:
        """Rank 0, after every rank has closed: dedupe, write the manifest last, rename into place.

        Any failure removes the staging directory: an export that cannot be completed leaves
        nothing that looks like a store.
        """
        if self.rank != 0:
            raise StoreError(f"{self.out_dir}: only rank 0 finalizes (this is rank {self.rank})")
        assert self._commit is not None  # rank 0 opened the output directory in __init__
        if self.state in ("finalized", "aborted"):
            raise StoreError(f"{self.out_dir}: writer already {self.state}")
        try:
            self.close()
            shards = self._collect()
            shards, removed = dedupe_shards(self.staging_dir, shards, self.parquet_options)
            manifest = Manifest(
                teacher_name=self.teacher_name, teacher_version=self.teacher_version,
                trained_until_day=self.trained_until_day, tasks=self.tasks, layer=self.layer,
                emb_dim=self.emb_dim, emb_dtype=self.emb_dtype, shards=shards,
                total_rows=sum(s.rows for s in shards), created_at=Manifest.now(),
                extra={**self.extra, "world_size": self.world_size,
                       "duplicates_removed": removed, "rows_per_shard": self.rows_per_shard},
            )
            for r in range(self.world_size):
                (self.staging_dir / rank_marker(r)).unlink()
            atomic_write_bytes(self.staging_dir / MANIFEST_NAME, manifest.to_json())
        except BaseException:
            self.abort()
            raise
        try:
            self._commit.__exit__(None, None, None)  # the rename; on failure it removes staging
        except BaseException:
            self.state = "aborted"
            raise
        self.state = "finalized"
        return manifest

    def _collect(self) -> list[ShardInfo]:
        shards: list[ShardInfo] = []
        for r in range(self.world_size):
            path = self.staging_dir / rank_marker(r)
            if not path.is_file():
                raise StoreError(f"{self.staging_dir}: rank {r} did not finish (no "
                                 f"{path.name}); finalize only after every rank closed its "
                                 f"writer")
            marker = json.loads(path.read_text())
            if marker.get("world_size") != self.world_size:
                raise StoreError(f"{path}: written by a run of world_size "
                                 f"{marker.get('world_size')}, this run has {self.world_size}")
            shards += [ShardInfo(**s) for s in marker["shards"]]
        listed = {s.file for s in shards}
        on_disk = {p.name for p in self.staging_dir.glob("*.parquet")}
        if on_disk - listed:
            raise StoreError(f"{self.staging_dir}: shard {sorted(on_disk - listed)[0]} is not "
                             f"listed by any rank (another export writing here?)")
        if listed - on_disk:
            raise StoreError(f"{self.staging_dir}: shard {sorted(listed - on_disk)[0]} listed "
                             f"by its rank is missing")
        return sorted(shards, key=lambda s: s.file)

    def abort(self) -> None:
        """Drop everything: this rank's open shard, and (rank 0) the whole staging directory."""
        if self.state in ("finalized", "aborted"):
            return
        if self._pq is not None:
            try:
                self._pq.close()
            finally:
                self._pq = None
                self._tmp_path().unlink(missing_ok=True)
        self._pending, self._pending_rows = [], 0
        self.state = "aborted"
        if self._commit is not None:
            err = StoreError("export aborted")
            self._commit.__exit__(StoreError, err, None)

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif self.world_size == 1:
            self.finalize()
        else:
            self.close()

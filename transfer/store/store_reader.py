"""Open, verify and read a teacher-output store (DESIGN §4).

A store is trusted only after it proves it is the one the exporter finished: the manifest exists,
every listed shard is there with its row count and sha256, nothing unlisted sits beside them, and
the shards have the schema the manifest describes. Values are checked when they are loaded: a
NaN or inf logit or embedding refuses the read, naming the shard, column and row.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.io.integrity import sha256_file
from gemkd.transfer.store.format import logit_column, store_schema
from gemkd.transfer.store.manifest import Manifest, ShardInfo


class TeacherStore:
    """A verified, read-only view of a teacher-output store.

    Parameters
    ----------
    path
        The store (a directory or an s3:// URI).
    verify_sha
        Hash every shard against the manifest. False still checks row counts and schemas; use it
        only where the same store was verified moments ago (e.g. every DDP rank after rank 0).

    Raises
    ------
    StoreError
        A missing store, or a manifest, shard or hash that does not match, named.
    """

    def __init__(self, path: str | Path, verify_sha: bool = True) -> None:
        self.path = fs.as_where(path)
        if not fs.is_dir(self.path):
            raise StoreError(f"{self.path}: no such store directory")
        self.manifest = Manifest.load(self.path)
        m = self.manifest
        self.schema = store_schema(m.tasks, m.emb_dim, m.emb_dtype)
        self._verify(verify_sha)

    # ---- metadata --------------------------------------------------------------------------
    @property
    def tasks(self) -> list[str]:
        return list(self.manifest.tasks)

    @property
    def emb_dim(self) -> int:
        return self.manifest.emb_dim

    @property
    def num_rows(self) -> int:
        return self.manifest.total_rows

    @property
    def logit_columns(self) -> list[str]:
        return [logit_column(t) for t in self.manifest.tasks]

    @property
    def emb_columns(self) -> list[str]:
        return ["emb", "emb_scale"] if self.manifest.emb_dtype == "int8" else ["emb"]

    @property
    def days(self) -> list[int]:
        return sorted({d for s in self.manifest.shards for d in s.days})

    def check_tasks(self, tasks: list[str]) -> None:
        """Refuse a consumer whose task list (names and order) differs from the store's."""
        if list(tasks) != self.manifest.tasks:
            raise StoreError(f"{self.path}: store has tasks {self.manifest.tasks}, student "
                             f"expects {list(tasks)}")

    def check_teacher(self, version: str, source: str) -> None:
        """Refuse a store exported from other weights than the teacher ``source`` names.

        A store is found by path (e.g. a cached step directory); only the manifest's weights hash
        proves which teacher wrote it, so a consumer that knows its teacher checks it here.
        """
        m = self.manifest
        if m.teacher_version != version:
            raise StoreError(f"{self.path}: exported from teacher {m.teacher_name!r} version "
                             f"{m.teacher_version[:12]}, but {source} has weights "
                             f"{version[:12]}; re-export the store from that teacher")

    # ---- verification ----------------------------------------------------------------------
    def _verify(self, verify_sha: bool) -> None:
        listed = {s.file for s in self.manifest.shards}
        stray = sorted(n for n in fs.list_names(self.path)
                       if n.endswith(".parquet") and n not in listed)
        if stray:
            raise StoreError(f"{self.path}: shard {stray[0]} is not listed in manifest.json "
                             f"(stray file from another export?)")
        for s in self.manifest.shards:
            f = fs.join(self.path, s.file)
            if not fs.is_file(f):
                raise StoreError(f"{f}: listed in manifest.json but missing")
            try:
                meta = pq.read_metadata(fs.open_input(f))
                schema = meta.schema.to_arrow_schema()
            except (pa.ArrowException, OSError) as e:
                raise StoreError(f"{f}: not a readable Parquet file ({e})") from None
            if meta.num_rows != s.rows:
                raise StoreError(f"{f}: has {meta.num_rows} rows, manifest.json says {s.rows}")
            for field in self.schema:
                if field.name not in schema.names:
                    raise StoreError(f"{f}: column {field.name!r} missing")
                got = schema.field(field.name).type
                if got != field.type:
                    raise StoreError(f"{f}: column {field.name!r} is {got}, expected "
                                     f"{field.type}")
        if verify_sha:
            shards = self.manifest.shards
            # hashlib releases the GIL on large reads: shards hash in parallel
            with ThreadPoolExecutor(max_workers=min(len(shards), os.cpu_count() or 1) or 1) as ex:
                digests = list(ex.map(lambda s: sha256_file(fs.join(self.path, s.file)),
                                      shards))
            for s, digest in zip(shards, digests, strict=True):
                if digest != s.sha256:
                    raise StoreError(f"{fs.join(self.path, s.file)}: sha256 differs from "
                                     f"manifest.json (file changed or corrupted after export)")

    # ---- reading ---------------------------------------------------------------------------
    def shards_for(self, days: tuple[int, int] | None) -> list[ShardInfo]:
        """Shards that can hold rows of the half-open day range (all when ``days`` is None)."""
        if days is None:
            return list(self.manifest.shards)
        lo, hi = days
        return [s for s in self.manifest.shards if any(lo <= d < hi for d in s.days)]

    def _columns(self, columns: list[str] | None) -> list[str]:
        """``columns`` (None: all of them), each one the store has, or a StoreError."""
        if columns is None:
            return list(self.schema.names)
        unknown = [c for c in columns if c not in self.schema.names]
        if unknown:
            raise StoreError(f"{self.path}: no column {unknown[0]!r}; the store has "
                             f"{', '.join(self.schema.names)}")
        return columns

    def read(self, days: tuple[int, int] | None = None,
             columns: list[str] | None = None) -> pa.Table:
        """Rows whose ``day`` is in ``[days[0], days[1])``, with only ``columns`` (all if None).

        Logit and embedding columns that are read are checked to be finite.
        """
        columns = self._columns(columns)
        shards = self.shards_for(days)
        if not shards:
            return self.schema.empty_table().select(columns)
        filesystem, root = fs.resolve(self.path)
        dataset = ds.dataset([f"{root}/{s.file}" for s in shards], schema=self.schema,
                             format="parquet", filesystem=filesystem)
        filt = None
        if days is not None:
            filt = (pc.field("day") >= days[0]) & (pc.field("day") < days[1])
        table = dataset.to_table(columns=columns, filter=filt)
        self._check_finite(table, columns, shards, days)
        return table

    def iter_row_groups(self, days: tuple[int, int] | None = None,
                        columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The rows of :meth:`read`, in its order, one Parquet row group at a time (memory: one
        row group, whatever the store's size); each table is checked as :meth:`read` checks."""
        columns = self._columns(columns)
        read = columns if days is None or "day" in columns else [*columns, "day"]
        for s in self.shards_for(days):
            pf = pq.ParquetFile(fs.open_input(fs.join(self.path, s.file)))
            for g in range(pf.num_row_groups):
                table = pf.read_row_group(g, columns=read)
                if days is not None:
                    day = table.column("day")
                    table = table.filter(pc.and_(pc.greater_equal(day, days[0]),
                                                 pc.less(day, days[1]))).select(columns)
                self.check_values(table, columns, days)
                yield table

    def check_values(self, table: pa.Table, columns: list[str],
                     days: tuple[int, int] | None) -> None:
        """Refuse NaN, inf or nulls in the logit and embedding ``columns`` of ``table`` (rows
        of ``days`` read some other way, e.g. one row group at a time), naming shard and row."""
        self._check_finite(table, columns, self.shards_for(days), days)

    def _check_finite(self, table: pa.Table, columns: list[str], shards: list[ShardInfo],
                      days: tuple[int, int] | None) -> None:
        """Vectorised check of everything read; only a failure pays for locating the row."""
        for c in columns:
            if not (c.startswith("logit_") or c in ("emb", "emb_scale")):
                continue
            if c == "emb" and self.manifest.emb_dtype == "int8":
                continue  # int8 codes are always finite; their scale column is checked
            col = table.column(c)
            if len(col) == 0:
                continue
            if isinstance(col.type, pa.FixedSizeListType):
                col = pa.chunked_array([ch.flatten() for ch in col.chunks], col.type.value_type)
            if col.null_count or not pc.all(pc.is_finite(col)).as_py():
                self._locate(c, shards, days)

    def _locate(self, column: str, shards: list[ShardInfo],
                days: tuple[int, int] | None) -> None:
        """Name the first shard and row (within its file) holding a non-finite value."""
        for s in shards:
            t = pq.read_table(fs.open_input(fs.join(self.path, s.file)), columns=["day", column])
            col = t.column(column).combine_chunks()
            if isinstance(col.type, pa.FixedSizeListType):
                v = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)
                bad = ~np.isfinite(v.astype(np.float32)).all(axis=1)
            else:
                bad = ~np.isfinite(col.to_numpy(zero_copy_only=False).astype(np.float32))
            if days is not None:
                day = t.column("day").to_numpy()
                bad &= (day >= days[0]) & (day < days[1])
            if bad.any():
                row = int(np.argmax(bad))
                raise StoreError(f"{fs.join(self.path, s.file)}: column {column!r} row {row} "
                                 f"is not finite (NaN/inf); the store cannot be used")
        raise StoreError(f"{self.path}: column {column!r} holds NaN/inf or nulls")

    # ---- conversion ------------------------------------------------------------------------
    def logits(self, table: pa.Table) -> np.ndarray:
        """``[n, T] float32`` teacher logits in the store's task order."""
        if table.num_rows == 0:
            return np.zeros((0, len(self.manifest.tasks)), dtype=np.float32)
        return np.stack([table.column(c).to_numpy() for c in self.logit_columns], axis=1)

    def embeddings(self, table: pa.Table) -> np.ndarray:
        """``[n, E] float32`` embeddings, de-quantised (``q * emb_scale``) for int8 stores."""
        return embeddings_of(table, self.manifest.emb_dim, self.manifest.emb_dtype)


def embeddings_of(table: pa.Table, emb_dim: int, emb_dtype: str) -> np.ndarray:
    """The ``emb`` column of ``table`` as ``[n, E] float32`` (de-quantising int8 codes)."""
    col = table.column("emb")
    n = table.num_rows
    if n == 0:
        return np.zeros((0, emb_dim), dtype=np.float32)
    flat = np.concatenate([ch.flatten().to_numpy() for ch in col.chunks]) \
        if col.num_chunks > 1 else col.chunk(0).flatten().to_numpy()
    out = flat.reshape(n, emb_dim).astype(np.float32)
    if emb_dtype == "int8":
        out *= table.column("emb_scale").to_numpy()[:, None]
    return out

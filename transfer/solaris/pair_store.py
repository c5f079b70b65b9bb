"""The pair store: one teacher vector per precomputed (day, user, item), one Parquet file plus
``pairs.json`` (written last, with the file's sha256), built in an atomic output directory like
the code store, so a directory with a valid ``pairs.json`` is a finished precomputation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io.integrity import int_ids, read_json_object, sha256_file
from gemkd.transfer.io.publish import output_directory

PAIRS_JSON = "pairs.json"
PAIRS_FILE = "pairs.parquet"
FORMAT_VERSION = 1


def pair_schema(dim: int) -> pa.Schema:
    """Parquet schema of a pair store of ``dim``-wide vectors."""
    return pa.schema([("day", pa.int32()), ("user_id", pa.int64()), ("item", pa.int64()),
                      ("rank", pa.int32()), ("vector", pa.list_(pa.float32(), dim))])


def write_pair_store(out: str | Path, day: Any, user_id: Any, item: Any, rank: Any,
                     vectors: np.ndarray, meta: dict[str, Any], overwrite: bool = False
                     ) -> Path:
    """Write the pairs (sorted by day, user, item) and ``pairs.json`` (``dim``, rows, sha256 and
    ``meta``, which must name the ``layer``) atomically; returns ``out``."""
    out = Path(out)
    d = int_ids("day", day, str(out))
    m = len(d)
    u, i, r = (int_ids(n, a, str(out), m) for n, a in
               (("user_id", user_id), ("item", item), ("rank", rank)))
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim != 2 or v.shape[0] != m or v.shape[1] < 1:
        raise StoreError(f"{out}: vectors must be float [{m}, dim >= 1], got {list(v.shape)}")
    if not np.isfinite(v).all():
        raise StoreError(f"{out}: vectors contain NaN or inf")
    if not isinstance(meta.get("layer"), str):
        raise StoreError(f"{out}: meta must name the teacher 'layer' the vectors come from")
    order = np.lexsort((i, u, d))
    if m > 1:
        keys = np.stack([d[order], u[order], i[order]], axis=1)
        if (keys[1:] == keys[:-1]).all(axis=1).any():
            raise StoreError(f"{out}: a (day, user_id, item) pair appears twice")
    dim = v.shape[1]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(v[order].reshape(-1)), dim)
    table = pa.Table.from_arrays(
        [pa.array(d[order].astype(np.int32)), pa.array(u[order]), pa.array(i[order]),
         pa.array(r[order].astype(np.int32)), vec], schema=pair_schema(dim))
    with output_directory(out, overwrite=overwrite, last=(PAIRS_JSON,)) as tmp:
        pq.write_table(table, tmp / PAIRS_FILE)
        info = {"format_version": FORMAT_VERSION, "dim": dim, "rows": m, "file": PAIRS_FILE,
                "sha256": sha256_file(tmp / PAIRS_FILE), "meta": meta}
        (tmp / PAIRS_JSON).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return out


class PairStore:
    """A verified, read-only pair store: ``pairs.json`` agrees with the file it names (missing
    keys, another sha256, row count or schema: one ``StoreError`` line naming the file)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        jpath = self.path / PAIRS_JSON
        info = read_json_object(jpath, f"{self.path}: no {PAIRS_JSON}: the precomputation "
                                       "did not finish")
        for key, typ in (("format_version", int), ("dim", int), ("rows", int), ("file", str),
                         ("sha256", str), ("meta", dict)):
            if not isinstance(info.get(key), typ):
                raise StoreError(f"{jpath}: key {key!r} missing or not {typ.__name__}")
        if info["format_version"] != FORMAT_VERSION:
            raise StoreError(f"{jpath}: format_version {info['format_version']}, this gemkd "
                             f"reads {FORMAT_VERSION}")
        self.info, self.file = info, self.path / info["file"]
        if not self.file.is_file():
            raise StoreError(f"{self.file}: listed in {PAIRS_JSON} but missing")
        if sha256_file(self.file) != info["sha256"]:
            raise StoreError(f"{self.file}: sha256 does not match {PAIRS_JSON}")
        got = pq.read_schema(self.file)
        if not got.equals(pair_schema(info["dim"])):
            raise StoreError(f"{self.file}: schema {got} is not the pair schema of dim "
                             f"{info['dim']}")

    @property
    def dim(self) -> int:
        return self.info["dim"]

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.info["meta"])

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(day, user_id, item, vectors [n, dim] float32)``, sorted by day, user, item."""
        t = pq.read_table(self.file)
        vec = t.column("vector").combine_chunks()
        flat = vec.values.to_numpy(zero_copy_only=False) if len(vec) else np.zeros(0, np.float32)
        return (t.column("day").to_numpy().astype(np.int64),
                t.column("user_id").to_numpy(), t.column("item").to_numpy(),
                flat.reshape(len(vec), self.dim).astype(np.float32, copy=False))

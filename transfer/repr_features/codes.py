"""Quantised representation codes and the on-disk code store (DESIGN §5, LoopFM).

A code is the compressor's tanh-bounded vector in ``(-1, 1)^code_dim``. It is stored quantised on
a fixed grid (no per-row scale: the bound is known), int8 as ``round(x·127)`` or int4 as
``round(x·7)`` packed two per byte, so a user's whole history of codes is cheap to keep and ship.

The store is one Parquet file plus ``codes.json`` (written last, with the file's sha256), built
inside ``atomic_directory``: a directory with a valid ``codes.json`` is a finished export, and a
reader proves the file is the one that was written before it trusts a single code.

The quantisation helpers live here (not in ``adapters``) because ``transfer`` must dequantise codes
itself and may not import the model packages; ``gemkd.adapters.compressor`` re-exports them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.io.integrity import int_ids, read_json_object, sha256_file
from gemkd.transfer.io.publish import output_directory

CODES_JSON = "codes.json"
CODES_FILE = "codes.parquet"
FORMAT_VERSION = 1
BITS = (8, 4)
_LEVELS = {8: 127, 4: 7}


# ---- quantisation ------------------------------------------------------------------------------
def code_nbytes(bits: int, code_dim: int) -> int:
    """Bytes one quantised code takes: ``code_dim`` for int8, ``ceil(code_dim / 2)`` for int4."""
    _check_bits(bits)
    return code_dim if bits == 8 else (code_dim + 1) // 2


def quantize_codes(codes: np.ndarray | torch.Tensor, bits: int) -> np.ndarray:
    """Codes ``[M, D]`` in ``[-1, 1]`` → int8 ``[M, D]`` (8 bits) or uint8 ``[M, ceil(D/2)]`` (4).

    int8: ``round(x·127)``; int4: ``round(x·7)`` in ``[-7, 7]``, two's-complement nibbles, code
    ``2j`` in the low nibble of byte ``j`` and ``2j+1`` in the high one (an odd last code pads with
    0). Values are clipped to ``[-1, 1]`` first, so the error per element is at most
    ``0.5/127`` (int8) or ``0.5/7`` (int4) for any input inside the bound.
    """
    _check_bits(bits)
    if isinstance(codes, torch.Tensor):
        codes = codes.detach().cpu().numpy()
    x = np.asarray(codes, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"codes must be [M, code_dim], got shape {list(x.shape)}")
    if not np.isfinite(x).all():
        raise ValueError("codes contain NaN or inf")
    levels = _LEVELS[bits]
    q = np.rint(np.clip(x, -1.0, 1.0) * np.float32(levels)).astype(np.int8)
    if bits == 8:
        return q
    if q.shape[1] % 2:
        q = np.concatenate([q, np.zeros((q.shape[0], 1), dtype=np.int8)], axis=1)
    nib = q.view(np.uint8) & np.uint8(0x0F)
    return nib[:, 0::2] | (nib[:, 1::2] << np.uint8(4))


def dequantize_codes(q: np.ndarray, bits: int, code_dim: int) -> np.ndarray:
    """Inverse of ``quantize_codes``: ``[M, nbytes]`` → float32 ``[M, code_dim]``."""
    _check_bits(bits)
    q = np.asarray(q)
    nbytes = code_nbytes(bits, code_dim)
    if q.ndim != 2 or q.shape[1] != nbytes or q.dtype.itemsize != 1 or q.dtype.kind not in "iu":
        raise ValueError(f"quantised codes must be 1-byte integers [M, {nbytes}] for "
                         f"bits={bits}, code_dim={code_dim}; got {q.dtype}{list(q.shape)}")
    levels = np.float32(_LEVELS[bits])
    if bits == 8:
        return q.view(np.int8).astype(np.float32) / levels
    u = q.view(np.uint8)
    out = np.empty((q.shape[0], 2 * nbytes), dtype=np.int8)
    out[:, 0::2] = (u & np.uint8(0x0F)).view(np.int8)
    out[:, 1::2] = (u >> np.uint8(4)).view(np.int8)
    out[out > 7] -= 16  # sign-extend the 4-bit two's complement
    return out[:, :code_dim].astype(np.float32) / levels


def _check_bits(bits: int) -> None:
    if bits not in BITS:
        raise ValueError(f"bits must be one of {list(BITS)}, got {bits!r}")


# ---- the store ---------------------------------------------------------------------------------
def code_schema(nbytes: int) -> pa.Schema:
    """Parquet schema of a code store with ``nbytes`` bytes per code."""
    return pa.schema([
        ("example_id", pa.int64()),
        ("user_id", pa.int64()),
        ("ts", pa.int64()),
        ("day", pa.int32()),
        ("code", pa.binary(nbytes)),
    ])


#: rows per row group of the code file, and how it is written (both writers: the same bytes)
ROW_GROUP_ROWS = 1 << 20
PARQUET_OPTIONS: dict[str, Any] = {"use_dictionary": ["day"],
                                   "write_statistics": ["user_id", "ts", "day"]}


def write_code_store(out: str | Path, example_id: Any, user_id: Any, ts: Any, day: Any,
                     codes_q: np.ndarray, bits: int, code_dim: int, meta: dict[str, Any],
                     overwrite: bool = False, row_group_size: int = ROW_GROUP_ROWS) -> fs.Where:
    """Write quantised codes to ``out`` atomically; returns ``out``.

    Rows are stored sorted by ``(user_id, ts, example_id)``, the order the as-of join reads them
    in. ``meta`` must carry ``teacher_version`` (the codes are meaningless without the teacher
    and compressor that produced them); it is stored verbatim in ``codes.json``. Everything is
    held at once: a store's codes arriving a row group at a time are written in bounded memory
    by :func:`gemkd.transfer.repr_features.code_sort.write_code_store_streamed` (same bytes).
    """
    out = fs.as_where(out)
    check_code_args(out, bits, code_dim, meta)
    eid, uid, t, d, q = check_code_rows(out, example_id, user_id, ts, day, codes_q, bits,
                                        code_dim)
    if len(eid) > 1 and np.unique(eid).size != len(eid):
        raise StoreError(f"{out}: example_id has duplicates")
    table = sorted_code_table(eid, uid, t, d, q)
    with output_directory(out, overwrite=overwrite, last=(CODES_JSON,)) as tmp:
        pq.write_table(table, tmp / CODES_FILE, row_group_size=row_group_size,
                       **PARQUET_OPTIONS)
        write_code_info(tmp, bits, code_dim, table.num_rows, meta)
    return out


def check_code_args(out: fs.Where, bits: int, code_dim: int, meta: dict[str, Any]) -> None:
    """The store-wide arguments of a code write: ``bits``, ``code_dim``, a JSON ``meta`` with
    ``teacher_version``; a StoreError naming ``out`` otherwise."""
    if bits not in BITS:
        raise StoreError(f"{out}: bits must be one of {list(BITS)}, got {bits!r}")
    if not isinstance(code_dim, int) or code_dim < 1:
        raise StoreError(f"{out}: code_dim must be a positive int, got {code_dim!r}")
    if not isinstance(meta, dict) or not isinstance(meta.get("teacher_version"), str) \
            or not meta["teacher_version"]:
        raise StoreError(f"{out}: meta must be a dict with a non-empty 'teacher_version'")
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{out}: meta is not JSON-serialisable ({e})") from None


def check_code_rows(out: fs.Where, example_id: Any, user_id: Any, ts: Any, day: Any,
                    codes_q: Any, bits: int, code_dim: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of codes as ``(example_id, user_id, ts, day, codes_q)`` arrays (int64 keys), or a
    StoreError naming ``out`` and the array that is wrong."""
    eid = int_ids("example_id", example_id, str(out))
    m = len(eid)
    uid, t, d = (int_ids(n, a, str(out), m)
                 for n, a in (("user_id", user_id), ("ts", ts), ("day", day)))
    if m and (d.min() < np.iinfo(np.int32).min or d.max() > np.iinfo(np.int32).max):
        raise StoreError(f"{out}: day values do not fit int32")
    q = np.asarray(codes_q)
    nbytes = code_nbytes(bits, code_dim)
    if q.shape != (m, nbytes) or q.dtype.itemsize != 1 or q.dtype.kind not in "iu":
        raise StoreError(f"{out}: codes_q must be 1-byte integers [{m}, {nbytes}] for "
                         f"bits={bits}, code_dim={code_dim}; got {q.dtype}{list(q.shape)}")
    return eid, uid, t, d, q


def sorted_code_table(eid: np.ndarray, uid: np.ndarray, t: np.ndarray, d: np.ndarray,
                      q: np.ndarray) -> pa.Table:
    """Checked rows (:func:`check_code_rows`) as a code table sorted by
    ``(user_id, ts, example_id)``."""
    order = np.lexsort((eid, t, uid))
    m, nbytes = q.shape
    code = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(nbytes), m, [None, pa.py_buffer(np.ascontiguousarray(q[order]).view(np.uint8))])
    return pa.Table.from_arrays(
        [pa.array(eid[order]), pa.array(uid[order]), pa.array(t[order]),
         pa.array(d[order].astype(np.int32)), code], schema=code_schema(nbytes))


def write_code_info(tmp: Path, bits: int, code_dim: int, rows: int, meta: dict[str, Any]) -> None:
    """``codes.json`` beside the finished code file in ``tmp`` (its commit marker)."""
    info = {"format_version": FORMAT_VERSION, "bits": bits, "code_dim": code_dim,
            "rows": rows, "file": CODES_FILE, "sha256": sha256_file(tmp / CODES_FILE),
            "meta": meta}
    (tmp / CODES_JSON).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


class CodeStore:
    """A verified, read-only code store: ``codes.json`` agrees with the Parquet file it names.

    Every disagreement (missing or unreadable json, wrong keys, sha256, row count, schema) is a
    one-line ``StoreError`` naming the file and what differs.
    """

    def __init__(self, path: str | Path, verify_sha: bool = True) -> None:
        self.path = fs.as_where(path)
        jpath = fs.join(self.path, CODES_JSON)
        if not fs.is_dir(self.path):
            raise StoreError(f"{self.path}: no such code store directory")
        info = read_json_object(jpath, f"{self.path}: no {CODES_JSON} — the code export did "
                                       "not finish")
        for key, typ in (("format_version", int), ("bits", int), ("code_dim", int),
                         ("rows", int), ("file", str), ("sha256", str), ("meta", dict)):
            if not isinstance(info.get(key), typ) or isinstance(info.get(key), bool):
                raise StoreError(f"{jpath}: key {key!r} missing or not {typ.__name__}")
        if info["format_version"] != FORMAT_VERSION:
            raise StoreError(f"{jpath}: format_version {info['format_version']}, this gemkd "
                             f"reads {FORMAT_VERSION}")
        if info["bits"] not in BITS or info["code_dim"] < 1:
            raise StoreError(f"{jpath}: bits {info['bits']} / code_dim {info['code_dim']} invalid")
        if info["file"] != CODES_FILE:
            raise StoreError(f"{jpath}: file {info['file']!r}, expected {CODES_FILE!r}")
        self.info = info
        self.file = fs.join(self.path, CODES_FILE)
        if not fs.is_file(self.file):
            raise StoreError(f"{self.file}: listed in {CODES_JSON} but missing")
        if verify_sha and sha256_file(self.file) != info["sha256"]:
            raise StoreError(f"{self.file}: sha256 does not match {CODES_JSON} (file changed "
                             f"after export)")
        try:
            md = pq.read_metadata(fs.open_input(self.file))
        except (pa.ArrowException, OSError) as e:
            raise StoreError(f"{self.file}: not a readable Parquet file ({e})") from None
        if md.num_rows != info["rows"]:
            raise StoreError(f"{self.file}: has {md.num_rows} rows, {CODES_JSON} says "
                             f"{info['rows']}")
        expected = code_schema(self.nbytes)
        got = md.schema.to_arrow_schema()
        for f in expected:
            if f.name not in got.names or got.field(f.name).type != f.type:
                have = got.field(f.name).type if f.name in got.names else "missing"
                raise StoreError(f"{self.file}: column {f.name!r} is {have}, expected {f.type}")

    @property
    def bits(self) -> int:
        return self.info["bits"]

    @property
    def code_dim(self) -> int:
        return self.info["code_dim"]

    @property
    def num_rows(self) -> int:
        return self.info["rows"]

    @property
    def nbytes(self) -> int:
        return code_nbytes(self.bits, self.code_dim)

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.info["meta"])

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """The whole table (or ``columns`` of it), rows sorted by ``(user_id, ts, example_id)``."""
        return pq.read_table(fs.open_input(self.file), columns=columns)

    def iter_row_groups(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The table a row group at a time, in file order (sorted by ``(user_id, ts,
        example_id)``): a pass over the store in the memory of one row group."""
        pf = pq.ParquetFile(fs.open_input(self.file))
        for i in range(pf.metadata.num_row_groups):
            yield pf.read_row_group(i, columns=columns)

    def codes_q(self, table: pa.Table) -> np.ndarray:
        """The ``code`` column of ``table`` as raw bytes ``[n, nbytes]`` uint8."""
        col = table.column("code").combine_chunks()
        n = len(col)
        if n == 0:
            return np.zeros((0, self.nbytes), dtype=np.uint8)
        buf = col.buffers()[1]
        start = col.offset * self.nbytes
        flat = np.frombuffer(buf, dtype=np.uint8, count=n * self.nbytes, offset=start)
        return flat.reshape(n, self.nbytes)

    def codes(self, table: pa.Table) -> np.ndarray:
        """The ``code`` column of ``table`` dequantised to float32 ``[n, code_dim]``."""
        return dequantize_codes(self.codes_q(table), self.bits, self.code_dim)

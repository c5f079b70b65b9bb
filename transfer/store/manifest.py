"""``manifest.json``: what a teacher-output store holds and how to check it (DESIGN §4).

The manifest is the store's commit record: it is written last, so a directory without one is an
export that did not finish. It names the teacher (and a hash of its weights, so a student run can
say exactly which teacher it learned from), the tasks and embedding layout, and every shard with
its row count and sha256, so a reader can prove the shards are the ones the exporter wrote.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.io.integrity import read_json_object
from gemkd.transfer.options import EMB_DTYPES, EmbDtype

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
_SHA = re.compile(r"^[0-9a-f]{64}$")


def weights_hash(state_dict: dict[str, Any]) -> str:
    """sha256 over the sorted parameter names, dtypes, shapes and raw tensor bytes.

    Identifies a teacher by what it computes, not by a file name or a checkpoint path, so two
    exports from the same weights carry the same version and a retrained teacher never does.
    """
    h = hashlib.sha256()
    for name in sorted(state_dict):
        value = state_dict[name]
        h.update(name.encode())
        h.update(b"\0")
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:  # e.g. a module's extra state
            h.update(repr(value).encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class ShardInfo:
    """One Parquet shard: its file name (relative to the store), rows, sha256 and the days in it."""

    file: str
    rows: int
    sha256: str
    days: list[int]


@dataclass
class Manifest:
    """The contents of ``manifest.json``; ``extra`` is free-form (export settings, counts)."""

    teacher_name: str
    teacher_version: str
    trained_until_day: int
    tasks: list[str]
    layer: str
    emb_dim: int
    emb_dtype: EmbDtype
    shards: list[ShardInfo] = field(default_factory=list)
    total_rows: int = 0
    created_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    @staticmethod
    def now() -> str:
        """UTC creation time in ISO 8601 (``2025-01-31T12:00:00+00:00``)."""
        return datetime.now(UTC).isoformat(timespec="seconds")

    @classmethod
    def load(cls, store: str | Path) -> Manifest:
        """Read and validate ``<store>/manifest.json``; every problem is a one-line StoreError."""
        store = fs.as_where(store)
        path = fs.join(store, MANIFEST_NAME)
        data = read_json_object(path, f"{store}: no {MANIFEST_NAME} — the export did not "
                                      "finish")
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = MANIFEST_NAME) -> Manifest:
        if not isinstance(data, dict):
            raise StoreError(f"{source}: expected a JSON object, got {type(data).__name__}")
        version = _get(data, "schema_version", int, source)
        if version != SCHEMA_VERSION:
            raise StoreError(f"{source}: schema_version {version}, this gemkd reads "
                             f"{SCHEMA_VERSION}; re-export the store")
        tasks = _get(data, "tasks", list, source)
        if not tasks or not all(isinstance(t, str) and t for t in tasks):
            raise StoreError(f"{source}: 'tasks' must be a non-empty list of names, got {tasks!r}")
        if len(set(tasks)) != len(tasks):
            raise StoreError(f"{source}: 'tasks' has duplicates: {tasks!r}")
        emb_dtype = _get(data, "emb_dtype", str, source)
        if emb_dtype not in EMB_DTYPES:
            raise StoreError(f"{source}: 'emb_dtype' is {emb_dtype!r}, expected one of "
                             f"{list(EMB_DTYPES)}")
        emb_dim = _get(data, "emb_dim", int, source)
        if emb_dim < 1:
            raise StoreError(f"{source}: 'emb_dim' must be >= 1, got {emb_dim}")
        shards = [_shard(s, i, source) for i, s in enumerate(_get(data, "shards", list, source))]
        names = [s.file for s in shards]
        if len(set(names)) != len(names):
            raise StoreError(f"{source}: a shard is listed twice")
        total = _get(data, "total_rows", int, source)
        if total != sum(s.rows for s in shards):
            raise StoreError(f"{source}: total_rows {total} != sum of shard rows "
                             f"{sum(s.rows for s in shards)}")
        return cls(
            teacher_name=_get(data, "teacher_name", str, source),
            teacher_version=_get(data, "teacher_version", str, source),
            trained_until_day=_get(data, "trained_until_day", int, source),
            tasks=list(tasks),
            layer=_get(data, "layer", str, source),
            emb_dim=emb_dim,
            emb_dtype=emb_dtype,
            shards=shards,
            total_rows=total,
            created_at=_get(data, "created_at", str, source),
            extra=_get(data, "extra", dict, source),
            schema_version=version,
        )


def _get(data: dict, key: str, typ: type, source: str) -> Any:
    if key not in data:
        raise StoreError(f"{source}: missing key {key!r}")
    value = data[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise StoreError(f"{source}: {key!r} must be {typ.__name__}, got "
                         f"{type(value).__name__} {value!r}")
    return value


def _shard(entry: Any, i: int, source: str) -> ShardInfo:
    where = f"{source} shards[{i}]"
    if not isinstance(entry, dict):
        raise StoreError(f"{where}: expected an object, got {type(entry).__name__}")
    info = ShardInfo(file=_get(entry, "file", str, where), rows=_get(entry, "rows", int, where),
                     sha256=_get(entry, "sha256", str, where),
                     days=_get(entry, "days", list, where))
    if "/" in info.file or "\\" in info.file or not info.file.endswith(".parquet"):
        raise StoreError(f"{where}: file {info.file!r} must be a .parquet name inside the store")
    if info.rows < 0:
        raise StoreError(f"{where}: rows must be >= 0, got {info.rows}")
    if not _SHA.match(info.sha256):
        raise StoreError(f"{where}: sha256 {info.sha256!r} is not 64 lowercase hex digits")
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in info.days):
        raise StoreError(f"{where}: days must be integers, got {info.days!r}")
    return info

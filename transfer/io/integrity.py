"""What every verified on-disk artefact shares (teacher stores, code stores): file checksums,
the JSON file that lists them, and the integer id arrays they are keyed by."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gemkd.transfer.errors import GemkdError, StoreError
from gemkd.transfer.io import fs


def sha256_file(path: str | Path) -> str:
    """sha256 of a local file or an object (``s3://``)."""
    if fs.is_remote(path):
        return fs.sha256(path)
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_json_object(path: str | Path, missing: str) -> dict[str, Any]:
    """The JSON object at ``path`` (local or ``s3://``); ``missing`` is the error when the file
    is not there (the artefact's commit marker: it is written last)."""
    if not fs.is_file(path):
        raise StoreError(missing)
    try:
        data = json.loads(fs.read_bytes(path).decode())
    except (OSError, GemkdError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{path}: unreadable ({e})") from None
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def int_ids(name: str, a: Any, where: str, rows: int | None = None) -> np.ndarray:
    """``a`` (numpy or a tensor on any device) as an int64 array ``[M]``, or a StoreError."""
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise StoreError(f"{where}: {name} must be an integer array [M], got {a.dtype}"
                         f"{list(a.shape)}")
    if rows is not None and len(a) != rows:
        raise StoreError(f"{where}: {name} has {len(a)} rows, example_id has {rows}")
    return a.astype(np.int64, copy=False)

"""Decoded row groups kept in memory between passes (a sweep's worker).

A sweep trains dozens of students over the same days in one process; each pass would decode the
same Parquet row groups again — most of a student loader's time, since a row group holds every
domain's rows and every event of each history while a student keeps its own domain and its last
few events. The reader's arrays after projection, domain selection and truncation are small;
keeping them (least recently used first out, within a byte budget) makes every later pass of
the same process read from memory. Keys name the file by path, size and modification time, so
a rewritten file is read anew.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

#: the most a process keeps (a small world's student days take a few MB)
MAX_BYTES = 1 << 30


def _nbytes(arrays: dict[str, Any]) -> int:
    total = 0
    for v in arrays.values():
        if isinstance(v, dict):
            total += _nbytes(v)
        elif isinstance(v, np.ndarray):
            total += v.nbytes
    return total


def _freeze(arrays: dict[str, Any]) -> None:
    for v in arrays.values():
        if isinstance(v, dict):
            _freeze(v)
        elif isinstance(v, np.ndarray):
            v.flags.writeable = False


class UnitCache:
    """An LRU of decoded row groups, capped at ``max_bytes``."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, tuple[dict, int]] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def key(path: Any, row_group: int, *parts: Any) -> tuple | None:
        """A key for a local file's row group (None for an object store: not cached)."""
        if not isinstance(path, Path):
            return None
        st = path.stat()
        return (str(path), st.st_size, st.st_mtime_ns, row_group, *parts)

    def get(self, key: tuple | None) -> dict | None:
        if key is None or key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key][0]

    def put(self, key: tuple | None, arrays: dict) -> None:
        if key is None:
            return
        size = _nbytes(arrays)
        if size > self.max_bytes:
            return
        _freeze(arrays)  # shared by every later pass: a write in place would corrupt them
        self._items[key] = (arrays, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self._bytes -= dropped

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0


#: the process's cache, shared by every reader built with ``cache=True``
UNITS = UnitCache()

"""Atomic outputs: nothing half-written is ever left under the name a user asked for.

A directory is built under a hidden temporary sibling and renamed into place only when complete;
on any exception the temporary directory is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from transfer.errors import GemkdError


@contextlib.contextmanager
def atomic_directory(target: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``target`` when the block exits cleanly.

    ``target`` must not exist (or be an empty directory) unless ``overwrite`` is set, in which
    case the old directory is replaced in one rename and then deleted.
    """
    target = Path(target)
    if target.exists() and not overwrite:
        if not target.is_dir() or any(target.iterdir()):
            raise GemkdError(f"{target}: already exists; choose a new path or pass --overwrite")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write a file through a temporary name and ``os.replace`` so readers never see a torn file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide outputs from other users
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

"""Locks that die with their process: ``filelock``'s ``FileLock`` (an OS lock the kernel drops
when the holder exits or is killed) on ``PATH``, plus ``PATH.owner`` naming the holder (pid,
host, start time) so that a refusal can say which process holds it.

The lock file itself is never written: a process that fails to take the lock may truncate it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from gemkd.transfer.errors import GemkdError


def owner_path(lock: Path) -> Path:
    return lock.with_name(lock.name + ".owner")


def try_lock(path: str | Path) -> FileLock | None:
    """The lock on ``path``, taken now, or None when another process (or another lock object of
    this one) holds it. The caller releases it."""
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock


def describe_owner(path: str | Path) -> str:
    """``pid 123 on host h since 12:00:00`` from ``PATH.owner`` (or "another process")."""
    try:
        o = json.loads(owner_path(Path(path)).read_text())
        return f"pid {o['pid']} on host {o['host']} since {o['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextlib.contextmanager
def exclusive(path: str | Path, what: str) -> Iterator[None]:
    """Hold the lock on ``path`` for the block; if another process holds it, a GemkdError
    ``"{what}: in use by pid ... on host ..."``."""
    path = Path(path)
    lock = try_lock(path)
    if lock is None:
        raise GemkdError(f"{what}: in use by {describe_owner(path)}; wait for it to finish or "
                         "choose another path")
    owner = owner_path(path)
    try:
        owner.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                     "since": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()

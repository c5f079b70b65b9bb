"""A full disk (ENOSPC, or a quota: EDQUOT) as one error line naming where, instead of a
traceback: :class:`DiskFull` is a :class:`~gemkd.transfer.errors.GemkdError`, so the command
line prints it as ``error: ...`` and the callers that remove an output they created (a run
directory with no finished work) do so as for any other error."""

from __future__ import annotations

import errno
from pathlib import Path

from gemkd.transfer.errors import GemkdError

#: the errnos of a write refused for want of space
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(GemkdError):
    """A write failed for want of space (the device or the user's quota is full)."""


def full_disk_cause(exc: BaseException) -> OSError | None:
    """The OSError of a full disk that ``exc`` is, or was raised from or while handling (an
    error raised while a failed write is being cleaned up or logged), else None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError) and cur.errno in FULL:
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def disk_full_error(exc: BaseException, where: str | Path | None) -> DiskFull | None:
    """``exc`` as a :class:`DiskFull` naming the file the write was for (the exception's own,
    the destination of a copy or rename first), else ``where`` (the output being written), or
    None when ``exc`` is not a full disk's."""
    if isinstance(exc, DiskFull):
        return exc
    cause = full_disk_cause(exc)
    if cause is None:
        return None
    path = cause.filename2 or cause.filename or where
    what = "no space left on device" if cause.errno == errno.ENOSPC else "disk quota exceeded"
    at = f"{path}: " if path is not None else ""
    return DiskFull(f"{at}{what} while writing it; free some space there (or write elsewhere) "
                    "and rerun")

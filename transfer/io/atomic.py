"""Atomic outputs: nothing half-written is ever left under the name a user asked for.

A directory is built under a hidden temporary sibling and renamed into place only when complete;
on any exception the temporary directory is removed and the target is untouched. Every writer has
its own temporary directory, and the final rename never replaces a non-empty directory unless
``overwrite`` is set, so two writers racing for one target never mix their files: without
``overwrite`` the second to finish gets a clear error; with it, the last one wins whole.

A writer holds a lock (``.<name>.tmp-<id>.lock`` beside its staging directory, taken before the
directory exists and dropped by the kernel if the writer dies) for as long as it builds there. A
staging directory whose lock nobody holds is what a killed writer left: the next writer to the
same target (or ``gemkd clean``) removes it; one whose lock is held is never touched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from gemkd.transfer.errors import GemkdError
from gemkd.transfer.io.lock import try_lock


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
    sweep_staging(target.parent, target.name)
    tmp, lock = _staging(target)
    try:
        yield tmp
        _commit(tmp, target, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _drop(lock)


def _staging(target: Path) -> tuple[Path, FileLock]:
    """A new hidden staging directory beside ``target``, its lock taken before it exists (so a
    sweeper never sees it unlocked)."""
    for _ in range(100):
        tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
        lock = try_lock(_lock_of(tmp))
        if lock is None:
            continue
        try:
            tmp.mkdir(mode=0o700)
        except FileExistsError:
            _drop(lock)
            continue
        return tmp, lock
    raise GemkdError(f"{target}: could not create a staging directory beside it")


def _lock_of(staging: Path) -> Path:
    return staging.with_name(staging.name + ".lock")


def _drop(lock: FileLock) -> None:
    Path(lock.lock_file).unlink(missing_ok=True)
    lock.release()


def sweep_staging(directory: str | Path, name: str | None = None) -> list[Path]:
    """Remove the staging directories in ``directory`` (of the target ``name``, or of every
    target) that no live writer holds; returns what was removed."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    pattern = f".{name}.tmp-*" if name is not None else ".*.tmp-*"
    removed = []
    for entry in sorted(directory.glob(pattern)):
        if entry.name.endswith(".lock"):
            if not entry.with_name(entry.name[:-len(".lock")]).exists():
                _sweep_lock(entry)  # a writer killed between its lock and its mkdir
            continue
        if not entry.is_dir() or entry.is_symlink():
            continue  # a file's temporary name (atomic_write_bytes), not a staging directory
        lock = try_lock(_lock_of(entry))
        if lock is None:
            continue  # a live writer
        try:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
        finally:
            _drop(lock)
    return removed


def _sweep_lock(path: Path) -> None:
    lock = try_lock(path)
    if lock is not None:
        _drop(lock)


# rename(2) of a directory onto an existing one: ENOTEMPTY/EEXIST (non-empty dir), ENOTDIR (file)
_TAKEN = (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR)


def _commit(tmp: Path, target: Path, overwrite: bool) -> None:
    """Rename ``tmp`` to ``target`` without ever replacing another writer's finished directory,
    unless ``overwrite``: then the one in place is first moved aside under a name of its own
    (retrying if a concurrent writer moved or replaced it in between) and deleted after."""
    for _ in range(100):
        try:
            os.rename(tmp, target)  # replaces at most an empty directory
            return
        except OSError as e:
            if e.errno not in _TAKEN:
                raise
        if not overwrite:
            raise GemkdError(f"{target}: already exists (written by another process while this "
                             "one ran); choose a new path or pass --overwrite")
        old = target.parent / f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(target, old)
        except FileNotFoundError:  # another writer moved it first: try again
            continue
        try:
            os.rename(tmp, target)
        except OSError as e:
            if e.errno not in _TAKEN:
                raise
            continue  # another writer's directory landed in between: move that one aside too
        finally:
            _remove(old)
        return
    raise GemkdError(f"{target}: could not be replaced (other writers kept replacing it)")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


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

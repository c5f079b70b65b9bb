"""Output directories on any filesystem: a local one is built in a hidden staging directory and
renamed into place (``atomic_directory``); an object store has no rename, so there the same
directory is built in a local staging directory and then *published* under its final names,
its commit marker last.

The protocol on an object store (DESIGN §4): (1) refuse a prefix that holds anything unless
``overwrite``, in which case the old commit marker is deleted first (from then on the old
output no longer counts) and then everything else under the prefix; (2) upload every data file;
(3) upload the commit marker (``manifest.json``, ``codes.json``, ``schema.json``) last, one PUT
that readers see whole or not at all. Readers trust nothing without a marker, and check every
file the marker lists (row counts, sha256) before use, so a crash at any point leaves either
the old output or no output, never one that loads with missing or mixed files.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gemkd.transfer.errors import GemkdError
from gemkd.transfer.io import fs
from gemkd.transfer.io.atomic import atomic_directory


@contextlib.contextmanager
def output_directory(target: Any, overwrite: bool = False,
                     last: Sequence[str] = ()) -> Iterator[Path]:
    """Yield a local directory that becomes ``target`` (a path or an ``s3://`` URI) when the
    block exits cleanly; ``last``: the commit marker files, published after everything else."""
    target = fs.as_where(target)
    if isinstance(target, Path):
        with atomic_directory(target, overwrite=overwrite) as tmp:
            yield tmp
        return
    _refuse_taken(target, overwrite)
    tmp = Path(tempfile.mkdtemp(prefix=f"gemkd-publish-{fs.name(target)}-"))
    try:
        yield tmp
        publish(tmp, target, overwrite=overwrite, last=last)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refuse_taken(target: str, overwrite: bool) -> None:
    if not overwrite and fs.list_files(target):
        raise GemkdError(f"{target}: already exists; choose a new path or pass --overwrite")


def publish(local: Path, target: str, overwrite: bool = False,
            last: Sequence[str] = ()) -> None:
    """Upload the local directory ``local`` to the prefix ``target``, commit markers last."""
    _refuse_taken(target, overwrite)  # again: another writer may have finished meanwhile
    if overwrite:
        for marker in last:
            fs.remove(fs.join(target, marker))  # the old output stops counting here
        for rel in fs.list_files(target):
            fs.remove(fs.join(target, rel))
    files = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    markers = [f for f in last if f in files]
    for rel in files:
        if rel not in markers:
            fs.upload(local / rel, fs.join(target, rel))
    for rel in markers:
        fs.upload(local / rel, fs.join(target, rel))

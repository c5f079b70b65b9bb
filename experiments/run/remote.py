"""A ``gemkd run`` directory on an object store (``--out s3://bucket/runs/x``), through a local
working copy: the prefix is downloaded first (so a rerun anywhere resumes from it), the run works
on local files (Lightning checkpoints, caches, the ledger), and the copy is mirrored back after
every finished step and student run and at the end.

Each mirror uploads what changed, commit markers last (a step's ``DONE`` after its files, a
store's ``manifest.json`` after its shards), then deletes what is gone locally: a mirror cut
short leaves steps without ``DONE``, which a rerun redoes. The run-directory lock guards the
working copy only: two machines running one remote run directory at once are not detected.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gemkd.transfer.io import fs

_MARKERS = ("manifest.json", "codes.json", "schema.json", "DONE")


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    return parts[-1] in (".lock", ".lock.owner") or any(".tmp-" in p for p in parts)


def _order(rel: str) -> tuple[int, str]:
    name = rel.rsplit("/", 1)[-1]
    return (2 if name == "DONE" else 1 if name in _MARKERS else 0, rel)


class WorkingCopy:
    """The local directory a remote run directory ``uri`` is worked on in."""

    def __init__(self, uri: str, local: Path) -> None:
        self.uri, self.local = uri, local
        self._sent: dict[str, tuple[int, int]] = {}

    def _stat(self, path: Path) -> tuple[int, int]:
        st = path.stat()
        return st.st_size, st.st_mtime_ns

    def pull(self) -> None:
        for rel in fs.list_files(self.uri):
            if not _skipped(rel):
                fs.download(fs.join(self.uri, rel), self.local / rel)
                self._sent[rel] = self._stat(self.local / rel)

    def sync(self) -> None:
        """Mirror the working copy to ``uri``: changed files (markers last), then deletions."""
        here = {str(p.relative_to(self.local)): p for p in self.local.rglob("*") if p.is_file()}
        here = {rel: p for rel, p in here.items() if not _skipped(rel)}
        for rel in sorted(here, key=_order):
            stat = self._stat(here[rel])
            if self._sent.get(rel) != stat:
                fs.upload(here[rel], fs.join(self.uri, rel))
                self._sent[rel] = stat
        for rel in fs.list_files(self.uri):
            if rel not in here and not _skipped(rel):
                fs.remove(fs.join(self.uri, rel))
                self._sent.pop(rel, None)


@contextlib.contextmanager
def working_copy(uri: str) -> Iterator[WorkingCopy]:
    """A pulled working copy of the remote run directory ``uri``, mirrored back on exit (also
    on failure: what finished is kept). ``GEMKD_WORK_DIR`` keeps copies between runs (one per
    URI); without it a temporary directory is used and removed."""
    keep = os.environ.get("GEMKD_WORK_DIR")
    if keep:
        local = Path(keep) / f"{fs.name(uri)}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}"
        local.mkdir(parents=True, exist_ok=True)
    else:
        local = Path(tempfile.mkdtemp(prefix="gemkd-run-"))
    copy = WorkingCopy(uri, local)
    try:
        copy.pull()
        try:
            yield copy
        finally:
            copy.sync()
    finally:
        if not keep:
            shutil.rmtree(local, ignore_errors=True)

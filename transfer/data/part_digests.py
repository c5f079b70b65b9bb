"""The sha256 of every part file of a dataset, recorded in ``schema.json`` (``part_sha256``) and
checked before the files are trusted (DESIGN §2.1).

Why: a row count and a Parquet footer say nothing of the values. One flipped bit in a label
page changes labels and the file still reads; a page's CRC32 (written in every page header,
verified on read) catches most of that, but not a change in a page header or the footer's
statistics, nor a part replaced by another valid file of the same rows. The digest of each whole
file, taken when the dataset is committed (``DatasetSchema.save``, which every writer calls
last) and compared before a run reads the files, catches every byte, as a teacher store's
manifest does for its shards (the same ``sha256_file``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gemkd.transfer.data.dataset_writer import day_paths
from gemkd.transfer.errors import DataError
from gemkd.transfer.io import fs
from gemkd.transfer.io.integrity import sha256_file

#: what :func:`verify_parts` says of a dataset written before digests were recorded
NO_DIGESTS = ("{root}/schema.json lists no part digests (a dataset written before gemkd "
              "recorded them): its files are checked by rows and ids only; regenerate it to "
              "have every byte checked")


def part_name(path: str | Path) -> str:
    """``day=N/part-K.parquet``: a part file's name relative to its dataset."""
    return f"{fs.name(fs.parent(path))}/{fs.name(path)}"


def digest_parts(root: str | Path, days: Iterable[int]) -> dict[str, str]:
    """sha256 of every part file of ``days`` under ``root``, by :func:`part_name`."""
    return {part_name(p): sha256_file(p)
            for day in days for p in day_paths(root, day) if fs.is_file(p)}


def verify_parts(root: str | Path, recorded: dict[str, str], days: Iterable[int]) -> int:
    """Check every part file of ``days`` against its recorded sha256: the files there are the
    ones listed, and each hashes to its digest. Returns the bytes hashed (0 when ``recorded``
    is empty: a dataset of an older gemkd, see :data:`NO_DIGESTS`).

    Raises
    ------
    DataError
        One line naming the file: changed, missing or not listed.
    """
    if not recorded:
        return 0
    hashed = 0
    for day in days:
        present = {part_name(p): p for p in day_paths(root, day) if fs.is_file(p)}
        for name, path in present.items():
            if name not in recorded:
                raise DataError(f"{path}: part file not listed in schema.json's part_sha256 "
                                "(added after the dataset was made)")
        for name in sorted(recorded):
            if name.startswith(f"day={day}/") and name not in present:
                raise DataError(f"{fs.join(root, name)}: missing (listed in schema.json)")
        for name, path in present.items():
            digest = sha256_file(path)
            hashed += fs.size(path)
            if digest != recorded[name]:
                raise DataError(f"{path}: sha256 {digest[:12]}... differs from the "
                                f"{recorded[name][:12]}... schema.json lists (the file changed "
                                "after the dataset was made: damaged or replaced)")
    return hashed

"""The whole-dataset checks of ``gemkd data validate``: every part file hashing to the sha256
``schema.json`` lists, every row read (its pages' CRC32s verified) and checked against
``schema.json`` (the reader's checks), every day file holding the rows ``schema.json`` lists, and
``example_id`` unique across all files — a repeated id would corrupt every join by id (teacher
stores, codes), so it is named with both places it occurs. ``check_days`` is the part of them a
``gemkd run`` affords before it reads a dataset: digests, rows and ids of the days it reads."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gemkd.transfer.data import validate
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.part_digests import NO_DIGESTS, verify_parts
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.data.vocabulary import verify_vocabularies
from gemkd.transfer.errors import DataError
from gemkd.transfer.io import fs


def validate_dataset(root: str | Path) -> DatasetReader:
    """Hash, read and check every file and row of the dataset at ``root``; returns its reader
    (``num_rows``, ``units``, ``schema.part_sha256``: empty for a dataset written before
    digests, whose bytes are then checked by the reader alone). Any problem is a DataError
    naming the file, column and row."""
    schema = DatasetSchema.load(fs.as_where(root))
    verify_parts(fs.as_where(root), schema.part_sha256, schema.days)
    verify_vocabularies(fs.as_where(root), schema.vocabularies)
    reader = DatasetReader(root, batch_size=65536, oracle=True)
    # the reader checks types, nulls, labels and ids row group by row group. Its batches are
    # views of their row group's buffers, so a loop variable holding the last one while the
    # next row group is read would keep two row groups alive (~1.4x the peak of one, measured
    # in docs/notes/2026-12-04-store-scale-2.md): each batch is dropped as soon as it is made.
    deque(reader, maxlen=0)
    check_unique_ids(reader)
    return reader


def check_days(root: str | Path, days: tuple[int, int]) -> str | None:
    """What a run checks before it reads the half-open ``days`` of the dataset at ``root``:
    each part file of those days hashes to its sha256 in ``schema.json``, each day holds the
    rows listed there, and ``example_id`` is unique over those days (the ids alone are read).
    Returns a note for a dataset without digests (None when every byte was checked).

    Raises
    ------
    DataError
        One line naming the file (and row) that differs.
    """
    where = fs.as_where(root)
    schema = DatasetSchema.load(where)
    first, end = days
    chosen = [d for d in schema.days if first <= d < end]
    verify_parts(where, schema.part_sha256, chosen)
    reader = DatasetReader(where, days=days, categorical=[], dense=[], sequence=[], tasks=[],
                           oracle=False)  # the footers: every day's rows against schema.json
    check_unique_ids(reader)
    return None if schema.part_sha256 else NO_DIGESTS.format(root=where)


def check_unique_ids(reader: DatasetReader) -> None:
    """``example_id`` is unique over the whole dataset, checked a row group at a time.

    Each row group's ids are checked among themselves and its [min, max] kept; row groups whose
    ranges overlap (none, in a dataset numbered in time order) are compared with each other.
    Memory: one row group (a cluster of overlapping ones). A repeat found is then named by a
    pass in file order that remembers only the repeated ids: the same line as a whole-dataset
    check (the first repeat in file order, and where its id first occurs).
    """
    units = list(reader.units)
    if not units:
        return
    bounds = np.zeros((len(units), 2), dtype=np.int64)
    repeated: set[int] = set()
    for i, ids in enumerate(_unit_ids(units)):
        bounds[i] = (ids.min(), ids.max()) if len(ids) else (1, 0)
        repeated |= _repeats(ids)
    order = np.argsort(bounds[:, 0], kind="stable")
    cluster: list[int] = []
    reach = None
    for i in order.tolist():
        lo, hi = bounds[i]
        if lo > hi:
            continue  # an empty row group
        if reach is not None and lo <= reach:
            cluster.append(i)
            reach = max(reach, int(hi))
            continue
        repeated |= _cluster_repeats(units, cluster)
        cluster, reach = [i], int(hi)
    repeated |= _cluster_repeats(units, cluster)
    if repeated:
        _name_first_repeat(units, repeated)


def _unit_ids(units: list) -> Iterator[np.ndarray]:
    """The example_id column of each unit (row group), in order; one file open at a time."""
    for table in validate.read_units(units, ["example_id"]):
        yield table.column(0).to_numpy()


def _repeats(ids: np.ndarray) -> set[int]:
    if len(ids) < 2 or (np.diff(ids) > 0).all():  # ascending, the usual case: no sort
        return set()
    s = np.sort(ids)
    return set(s[1:][s[1:] == s[:-1]].tolist())


def _cluster_repeats(units: list, cluster: list[int]) -> set[int]:
    """Ids occurring in more than one row group of ``cluster`` (row groups whose id ranges
    overlap); repeats inside one row group were found already."""
    if len(cluster) < 2:
        return set()
    chosen = sorted(cluster)
    parts = [np.unique(ids) for ids in _unit_ids([units[i] for i in chosen])]
    return _repeats(np.concatenate(parts))


def _name_first_repeat(units: list, repeated: set[int]) -> None:
    paths = list(dict.fromkeys(u.path for u in units))
    wanted = np.fromiter(repeated, dtype=np.int64)
    seen: dict[int, tuple] = {}
    for u, ids in zip(units, _unit_ids(units), strict=True):
        for j in np.flatnonzero(np.isin(ids, wanted)).tolist():
            key, at = int(ids[j]), (u.path, u.first_row + j)
            if key in seen:
                first = seen[key]
                raise DataError(f"{at[0]}: column 'example_id' row {at[1]}: example_id {key} "
                                f"is repeated (first at {first[0]} row {first[1]}); ids must "
                                f"be unique")
            seen[key] = at
    raise DataError(f"{paths[0]}: example_id repeats {sorted(repeated)[:3]} could not be "
                    f"located (files changed while validating?)")

"""Checks that turn bad input into one clear line naming the file, column and row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.errors import DataError
from gemkd.transfer.io import fs


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """Open a Parquet file's footer (a path or an ``s3://`` URI); an empty, truncated or
    foreign file is a DataError. Its pages' CRC32s (``dataset_writer.WRITE_OPTIONS``) are
    verified as they are read: a page that fails is an error of the read (a file written
    without them is read as before)."""
    if not fs.is_file(path):
        raise DataError(f"{path}: missing Parquet file (listed in schema.json)")
    if fs.size(path) == 0:
        raise DataError(f"{path}: empty file, expected Parquet")
    try:
        return pq.ParquetFile(fs.open_input(path), page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable Parquet file ({_short(e)})") from None


def read_units(units: Iterable[Any], columns: list[str]) -> Iterator[pa.Table]:
    """``columns`` of each unit's row group (``DatasetReader.units``: ``path``, ``row_group``),
    in order, one table at a time, with one file open at a time."""
    path, pf = None, None
    for u in units:
        if u.path != path:
            path, pf = u.path, open_parquet(u.path)
        assert pf is not None
        try:
            table = pf.read_row_group(u.row_group, columns=columns)
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{u.path}: row group {u.row_group} unreadable ({_short(e)})"
                            ) from None
        yield table


def check_columns(path: fs.Where, physical: pa.Schema, expected: dict[str, pa.DataType]) -> None:
    """Every expected column is present with exactly the expected Arrow type."""
    for name, typ in expected.items():
        idx = physical.get_field_index(name)
        if idx < 0:
            raise DataError(f"{path}: column {name!r} missing (expected {typ})")
        got = physical.field(idx).type
        if got != typ:
            raise DataError(f"{path}: column {name!r} has type {got}, expected {typ}")


def check_no_nulls(path: fs.Where, table: pa.Table, row0: int) -> None:
    for name in table.column_names:
        col = table.column(name)
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise DataError(f"{path}: column {name!r} row {row0 + row}: null value")


def check_no_null_events(path: fs.Where, name: str, values: pa.Array, offsets: np.ndarray,
                         row0: int) -> None:
    """No null inside a history list (``check_no_nulls`` sees only null lists); ``offsets``
    index ``values`` and map a position back to its row."""
    if not values.null_count:
        return
    null = values.is_null().to_numpy(zero_copy_only=False)
    null[:offsets[0]] = False
    null[offsets[-1]:] = False
    if null.any():
        pos = int(np.argmax(null))
        row = int(np.searchsorted(offsets, pos, side="right") - 1)
        raise DataError(f"{path}: column {name!r} row {row0 + row}: null value in the list")


def check_below(path: fs.Where, name: str, values: np.ndarray, limit: int, what: str,
                row0: int) -> None:
    """Indices into a list of ``limit`` entries (e.g. the schema's domains) must be < limit."""
    if values.size == 0 or values.max() < limit:
        return
    row = int(np.argmax(values >= limit))
    raise DataError(f"{path}: column {name!r} row {row0 + row}: {values[row]} is not one of "
                    f"the {limit} {what} in schema.json")


def check_binary(path: fs.Where, name: str, values: np.ndarray, row0: int) -> None:
    bad = (values != 0) & (values != 1)
    if bad.any():
        row = int(np.argmax(bad))
        raise DataError(
            f"{path}: column {name!r} row {row0 + row}: label {values[row]} outside {{0, 1}}"
        )


def check_non_negative(path: fs.Where, name: str, values: np.ndarray, row0: int,
                       offsets: np.ndarray | None = None) -> None:
    """Ids must be >= 0; for a list column ``offsets`` maps the value back to its row."""
    if values.size == 0 or values.min() >= 0:
        return
    pos = int(np.argmax(values < 0))
    row = pos if offsets is None else int(np.searchsorted(offsets, pos, side="right") - 1)
    raise DataError(f"{path}: column {name!r} row {row0 + row}: negative id {values[pos]}")


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__

"""Parquet layout shared by every dataset source: ``DIR/day=N/part-K.parquet``.

A day is one or more part files, read as one day in part order (``day_paths``): the streaming
importer and the synthetic world close a part after a fixed number of rows (``DayWriter``) instead
of holding a day in memory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.io import fs

_PART = re.compile(r"part-(\d+)\.parquet")
ROW_GROUP_SIZE = 16_384  # the unit of parallel reading: workers split the row groups
PART_ROWS = 64 * ROW_GROUP_SIZE  # rows of a day's part file (1,048,576) for streaming writers
#: how every dataset file is written: snappy, and a CRC32 in every page header, which the
#: readers verify (``validate.open_parquet``) so a damaged page is an error, not other values
WRITE_OPTIONS = {"compression": "snappy", "write_page_checksum": True}


def day_path(root: str | Path, day: int) -> str | Path:
    """The day's file (a ``Path``, or a URI for a dataset on an object store)."""
    return fs.join(root, f"day={day}", "part-0.parquet")


def part_path(root: str | Path, day: int, part: int) -> str | Path:
    """Part ``part`` of the day's files."""
    return fs.join(root, f"day={day}", f"part-{part}.parquet")


def day_paths(root: str | Path, day: int) -> list[str | Path]:
    """The day's part files in part order; ``[day_path]`` (part 0, whether it exists or not, so
    an error names it) when the folder holds none."""
    parts = []
    for name in fs.list_names(fs.join(root, f"day={day}")):
        match = _PART.fullmatch(name)
        if match:
            parts.append(int(match.group(1)))
    return [part_path(root, day, k) for k in sorted(parts)] or [day_path(root, day)]


def read_day(root: str | Path, day: int, columns: list[str] | None = None) -> pa.Table:
    """The day's rows (every part, in order) with the named columns."""
    from gemkd.transfer.data import validate  # validate reads files this module names

    return pa.concat_tables([validate.open_parquet(p).read(columns=columns)
                             for p in day_paths(root, day)])


def write_day(table: pa.Table, root: Path, day: int) -> Path:
    """Write one day's rows into a local folder (an output directory's temporary one); the file
    is deterministic for the same table (byte-identical)."""
    path = Path(day_path(root, day))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=ROW_GROUP_SIZE, **WRITE_OPTIONS)
    return path


class DayWriter:
    """A day's part files, written a row group at a time: rows are buffered only up to a row
    group, and a part file is closed after ``part_rows`` rows."""

    def __init__(self, root: Path, day: int, schema: pa.Schema, part_rows: int) -> None:
        self.root, self.day, self.schema, self.part_rows = root, day, schema, part_rows
        self.buffer: list[pa.Table] = []
        self.buffered = self.rows = self.in_part = self.parts = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> None:
        self.buffer.append(table)
        self.buffered += table.num_rows
        while self.buffered >= ROW_GROUP_SIZE:
            self._flush(ROW_GROUP_SIZE)

    def close(self) -> int:
        if self.buffered:
            self._flush(self.buffered)
        if self.writer is not None:
            self.writer.close()
        return self.rows

    def _flush(self, n: int) -> None:
        table = pa.concat_tables(self.buffer)
        group, rest = table.slice(0, n), table.slice(n)
        self.buffer, self.buffered = ([rest] if rest.num_rows else []), rest.num_rows
        if self.writer is None or self.in_part >= self.part_rows:
            if self.writer is not None:
                self.writer.close()
            path = Path(part_path(self.root, self.day, self.parts))
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(path, self.schema, **WRITE_OPTIONS)
            self.parts += 1
            self.in_part = 0
        self.writer.write_table(group.combine_chunks(), row_group_size=ROW_GROUP_SIZE)
        self.in_part += n
        self.rows += n

"""Parquet layout shared by every dataset source: ``DIR/day=N/part-0.parquet``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.io import fs

ROW_GROUP_SIZE = 16_384  # the unit of parallel reading: workers split the row groups


def day_path(root: str | Path, day: int) -> str | Path:
    """The day's file (a ``Path``, or a URI for a dataset on an object store)."""
    return fs.join(root, f"day={day}", "part-0.parquet")


def write_day(table: pa.Table, root: Path, day: int) -> Path:
    """Write one day's rows into a local folder (an output directory's temporary one); the file
    is deterministic for the same table (byte-identical)."""
    path = Path(day_path(root, day))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=ROW_GROUP_SIZE, compression="snappy")
    return path

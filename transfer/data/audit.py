"""The whole-dataset checks of ``gemkd data validate``: every row read and checked against
``schema.json`` (the reader's checks), every day file holding the rows ``schema.json`` lists, and
``example_id`` unique across all files — a repeated id would corrupt every join by id (teacher
stores, codes), so it is named with both places it occurs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.transfer.data import validate
from gemkd.transfer.data.reader import DatasetReader
from gemkd.transfer.errors import DataError


def validate_dataset(root: str | Path) -> DatasetReader:
    """Read and check every row of the dataset at ``root``; returns its reader (``num_rows``,
    ``units``). Any problem is a DataError naming the file, column and row."""
    reader = DatasetReader(root, batch_size=65536, oracle=True)
    for _ in reader:  # the reader checks types, nulls, labels and ids row group by row group
        pass
    check_unique_ids(reader)
    return reader


def check_unique_ids(reader: DatasetReader) -> None:
    """``example_id`` is unique over the whole dataset."""
    ids, files, rows = [], [], []
    for i, path in enumerate(dict.fromkeys(u.path for u in reader.units)):
        col = validate.open_parquet(path).read(columns=["example_id"]).column(0).to_numpy()
        ids.append(col)
        files.append(np.full(len(col), i, dtype=np.int32))
        rows.append(np.arange(len(col)))
    if not ids:
        return
    all_ids = np.concatenate(ids)
    dup = pd.Index(all_ids).duplicated(keep="first")
    if not dup.any():
        return
    second = int(np.argmax(dup))
    first = int(np.argmax(all_ids == all_ids[second]))
    paths = list(dict.fromkeys(u.path for u in reader.units))
    where = np.concatenate(files), np.concatenate(rows)
    raise DataError(f"{paths[where[0][second]]}: column 'example_id' row {where[1][second]}: "
                    f"example_id {all_ids[second]} is repeated (first at "
                    f"{paths[where[0][first]]} row {where[1][first]}); ids must be unique")

"""Drop duplicated example_ids across a store's shards (a padded sampler repeats examples).

Bounded memory: the id axis is swept in windows. Each row group's example_id range comes from
its footer statistics; a window holds the ids (of every row group whose range reaches into it)
that fall inside it — about ``window_rows`` ids plus one row group per rank — so every copy of
an id is seen in the same window, in shard order, whatever the store's size. Shards that lose
rows are rewritten one row group at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io.integrity import sha256_file
from gemkd.transfer.store.manifest import ShardInfo

#: ids gathered per window of the sweep (8 B each, plus their places: ~0.1 GB)
WINDOW_ROWS = 1 << 22


@dataclass(frozen=True)
class _Group:
    shard: int  # index into the shard list (shard order = keep order)
    group: int  # row group within the file
    first_row: int  # the group's first row within the file
    rows: int
    lo: int  # example_id range
    hi: int


def dedupe_shards(root: Path, shards: list[ShardInfo], options: dict[str, Any],
                  window_rows: int = WINDOW_ROWS) -> tuple[list[ShardInfo], int]:
    """Keep the first row (in shard order) of every example_id; rewrite only affected shards.

    Keyed by example_id, never by batch position: a DistributedSampler that pads ranks repeats
    whole examples on another rank, at a different batch index. Returns the shards as they are
    now and the number of rows dropped.

    Raises:
        StoreError: a shard's row count differs from its rank's marker.
    """
    if not shards:
        return shards, 0
    groups = _groups(root, shards)
    drop = _duplicates(root, shards, groups, max(1, window_rows))
    if not drop:
        return shards, 0
    out: list[ShardInfo] = []
    for i, s in enumerate(shards):
        if i not in drop:
            out.append(s)
            continue
        kept = _rewrite(root / s.file, np.sort(drop[i]), options)
        if kept is not None:
            out.append(ShardInfo(file=s.file, rows=kept[0], sha256=sha256_file(root / s.file),
                                 days=kept[1]))
    return out, int(sum(len(v) for v in drop.values()))


def _groups(root: Path, shards: list[ShardInfo]) -> list[_Group]:
    """Every row group's place and example_id range (footer statistics, else a read)."""
    groups = []
    for i, s in enumerate(shards):
        path = root / s.file
        meta = pq.read_metadata(path)
        if meta.num_rows != s.rows:
            raise StoreError(f"{path}: has {meta.num_rows} rows, its rank's marker says {s.rows}")
        col = meta.schema.to_arrow_schema().get_field_index("example_id")
        first = 0
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            st = rg.column(col).statistics
            if rg.num_rows and (st is None or not st.has_min_max):
                ids = pq.ParquetFile(path).read_row_group(g, columns=["example_id"])[0]
                lo, hi = int(pc.min(ids).as_py()), int(pc.max(ids).as_py())
            elif rg.num_rows:
                lo, hi = int(st.min), int(st.max)
            if rg.num_rows:
                groups.append(_Group(i, g, first, rg.num_rows, lo, hi))
            first += rg.num_rows
    return groups


def _duplicates(root: Path, shards: list[ShardInfo], groups: list[_Group],
                window_rows: int) -> dict[int, np.ndarray]:
    """Rows (within their file) to drop, by shard index: every copy of an id after its first in
    shard order. The windows are cut at row groups' range starts, ~``window_rows`` ids apart."""
    by_lo = sorted(groups, key=lambda g: g.lo)
    cuts: list[int] = []
    acc = 0
    for g in by_lo:
        if acc >= window_rows and (not cuts or g.lo > cuts[-1]):
            cuts.append(g.lo)
            acc = 0
        acc += g.rows
    bounds = [None, *cuts, None]
    ordered = sorted(groups, key=lambda g: (g.shard, g.group))
    files: dict[int, pq.ParquetFile] = {}
    drop: dict[int, list[np.ndarray]] = {}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        ids, shard, row = [], [], []
        for g in ordered:
            if (b is not None and g.lo >= b) or (a is not None and g.hi < a):
                continue
            if g.shard not in files:
                files[g.shard] = pq.ParquetFile(root / shards[g.shard].file)
            x = files[g.shard].read_row_group(g.group, columns=["example_id"])[0].to_numpy()
            keep = np.ones(len(x), dtype=bool)
            if a is not None:
                keep &= x >= a
            if b is not None:
                keep &= x < b
            at = np.flatnonzero(keep)
            ids.append(x[at])
            shard.append(np.full(len(at), g.shard, dtype=np.int64))
            row.append(at + g.first_row)
        if not ids:
            continue
        # a hash table (pandas' khash), not a sort; the concatenation is in shard order, so
        # ``keep="first"`` keeps the earliest copy (rank 0 before rank 1)
        dup = pd.Index(np.concatenate(ids)).duplicated(keep="first")
        if dup.any():
            s, r = np.concatenate(shard)[dup], np.concatenate(row)[dup]
            for i in np.unique(s).tolist():
                drop.setdefault(i, []).append(r[s == i])
    return {i: np.concatenate(v) for i, v in drop.items()}


def _rewrite(path: Path, drop: np.ndarray, options: dict[str, Any]
             ) -> tuple[int, list[int]] | None:
    """Rewrite ``path`` without rows ``drop`` (sorted), a row group at a time, through a hidden
    temporary file renamed into place; None (and the file removed) when no row is left."""
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    if len(drop) == meta.num_rows:
        path.unlink()
        return None
    tmp = path.with_name(f".{path.name}.tmp")
    rows, days, first = 0, set(), 0
    try:
        with pq.ParquetWriter(tmp, pf.schema_arrow, **options) as w:
            for g in range(meta.num_row_groups):
                table = pf.read_row_group(g)
                n = table.num_rows
                lo, hi = np.searchsorted(drop, [first, first + n])
                if hi > lo:
                    keep = np.ones(n, dtype=bool)
                    keep[drop[lo:hi] - first] = False
                    table = table.filter(pa.array(keep))
                first += n
                if table.num_rows:
                    w.write_table(table, row_group_size=table.num_rows)
                    rows += table.num_rows
                    days.update(np.unique(table.column("day").to_numpy()).tolist())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return rows, sorted(int(d) for d in days)

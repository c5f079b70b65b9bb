"""Drop duplicated example_ids across a store's shards (a padded sampler repeats examples)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io.integrity import sha256_file
from gemkd.transfer.store.format import write_shard_file
from gemkd.transfer.store.manifest import ShardInfo


def dedupe_shards(root: Path, shards: list[ShardInfo],
                  options: dict[str, Any]) -> tuple[list[ShardInfo], int]:
    """Keep the first row (in shard order) of every example_id; rewrite only affected shards.

    Keyed by example_id, never by batch position: a DistributedSampler that pads ranks repeats
    whole examples on another rank, at a different batch index.
    """
    if not shards:
        return shards, 0
    ids = [pq.read_table(root / s.file, columns=["example_id"]).column(0).to_numpy()
           for s in shards]
    for s, shard_ids in zip(shards, ids, strict=True):
        if len(shard_ids) != s.rows:
            raise StoreError(f"{root / s.file}: has {len(shard_ids)} rows, its rank's marker "
                             f"says {s.rows}")
    # a hash table (pandas' khash), not a sort: ~4x faster than argsort on 1M ids; ``keep=
    # "first"`` keeps the earliest copy in shard order (rank 0 before rank 1)
    drop = pd.Index(np.concatenate(ids)).duplicated(keep="first")
    if not drop.any():
        return shards, 0
    out: list[ShardInfo] = []
    start = 0
    for s, shard_ids in zip(shards, ids, strict=True):
        mine = drop[start:start + len(shard_ids)]
        start += len(shard_ids)
        if not mine.any():
            out.append(s)
            continue
        path = root / s.file
        if mine.all():
            path.unlink()
            continue
        table = pq.read_table(path).filter(pa.array(~mine))
        write_shard_file(table, path, options)
        days = np.unique(table.column("day").to_numpy()).tolist()
        out.append(ShardInfo(file=s.file, rows=table.num_rows, sha256=sha256_file(path),
                             days=[int(d) for d in days]))
    return out, int(drop.sum())

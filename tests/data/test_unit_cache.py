"""The process cache of decoded row groups: a second pass reads from memory and gives the same
batches; a rewritten file is read anew; the byte budget evicts the least recently used."""

from __future__ import annotations

import os

import numpy as np
import torch

from gemkd.transfer.data.reader import DatasetReader
from gemkd.transfer.data.unit_cache import UNITS, UnitCache


def batches(data, **kw) -> list:
    return list(DatasetReader(data, days=(0, 2), batch_size=64, max_seq_len=5,
                              domains=["stories"], cache=True, **kw))


def same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for name in ("dense", "categorical", "labels", "example_id", "seq_offsets"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        assert x.seq_values.keys() == y.seq_values.keys()
        for k in x.seq_values:
            assert torch.equal(x.seq_values[k], y.seq_values[k])


def test_second_pass_reads_from_memory(tiny_data, monkeypatch):
    UNITS.clear()
    loads = []
    original = DatasetReader._load
    monkeypatch.setattr(DatasetReader, "_load",
                        lambda self, unit, pf: loads.append(unit) or original(self, unit, pf))
    first = batches(tiny_data)
    n = len(loads)
    assert n > 0
    second = batches(tiny_data)
    assert len(loads) == n  # nothing decoded again
    same(first, second)
    uncached = list(DatasetReader(tiny_data, days=(0, 2), batch_size=64, max_seq_len=5,
                                  domains=["stories"]))
    same(first, uncached)
    assert len(loads) == 2 * n  # a reader without cache decodes
    batches(tiny_data, sequence=[])  # another projection: its own entries
    assert len(loads) == 3 * n


def test_a_rewritten_file_is_read_anew(tiny_data, tmp_path, monkeypatch):
    import shutil

    UNITS.clear()
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    loads = []
    original = DatasetReader._load
    monkeypatch.setattr(DatasetReader, "_load",
                        lambda self, unit, pf: loads.append(unit) or original(self, unit, pf))
    batches(data)
    n = len(loads)
    path = data / "day=0" / "part-0.parquet"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # as a rewrite would
    batches(data)
    assert n < len(loads) < 2 * n  # day 0's row groups again, day 1's from memory


def test_least_recently_used_goes_first():
    cache = UnitCache(max_bytes=3 * 800)
    arrays = {i: {"x": np.zeros(100, dtype=np.int64)} for i in range(4)}  # 800 bytes each
    for i in range(3):
        cache.put((i,), arrays[i])
    assert cache.get((0,)) is arrays[0]  # 0 is now the most recent
    cache.put((3,), arrays[3])
    assert cache.get((1,)) is None and cache.get((0,)) is arrays[0]
    assert cache.get((3,)) is arrays[3]
    cache.put((9,), {"x": np.zeros(1000)})  # larger than the budget: not kept
    assert cache.get((9,)) is None
    assert UnitCache.key("s3://bucket/data/day=0/part-0.parquet", 0) is None

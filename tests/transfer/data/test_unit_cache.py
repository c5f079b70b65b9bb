"""The process cache of decoded row groups: a second pass reads from memory and gives the same
batches; a rewritten file is read anew; the byte budget evicts the least recently used."""

from __future__ import annotations

import os

import numpy as np
import torch

from gemkd.transfer.data.dataset_reader import DatasetReader
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


def test_unshuffled_cached_batches_are_cut_once_and_handed_out_as_copies(tiny_data, monkeypatch):
    """The second pass of a cached, time-ordered reader takes the batches the first cut (the
    same tensors), each a fresh Batch: a consumer's field or meta change stays its own."""
    UNITS.clear()
    reader = DatasetReader(tiny_data, days=(0, 2), batch_size=64, max_seq_len=5,
                           domains=["stories"], cache=True)
    assert not reader.in_memory()  # nothing read yet
    first = list(reader)
    assert reader.in_memory()
    first[0].meta["label_mask"] = "set by a consumer"
    first[0].labels = None
    cuts = []
    original = DatasetReader._batch
    monkeypatch.setattr(DatasetReader, "_batch",
                        lambda self, a, rows: cuts.append(rows) or original(self, a, rows))
    second = list(reader)
    assert cuts == []  # nothing cut again
    assert second[0].meta == {} and second[0].labels is not None
    same(second, list(DatasetReader(tiny_data, days=(0, 2), batch_size=64, max_seq_len=5,
                                    domains=["stories"])))
    assert all(a is not b and a.dense is b.dense
               for a, b in zip(first[1:], second[1:], strict=True))
    assert second[1].domain.dtype == torch.int64 and second[1].day.dtype == torch.int64
    # another batch size cuts its own; a shuffled or uncached reader never counts as in memory
    assert not DatasetReader(tiny_data, days=(0, 2), batch_size=32, max_seq_len=5,
                             domains=["stories"], cache=True).in_memory()
    assert not DatasetReader(tiny_data, days=(0, 2), batch_size=64, max_seq_len=5,
                             domains=["stories"], cache=True, shuffle=True).in_memory()
    assert not DatasetReader(tiny_data, days=(0, 2), batch_size=64, max_seq_len=5,
                             domains=["stories"]).in_memory()


def test_a_pass_from_memory_runs_without_a_prefetch_thread(tiny_data):
    import threading
    import time

    from gemkd.transfer.data.datamodule import AdsDataModule

    UNITS.clear()
    dm = AdsDataModule(tiny_data, train_days=(0, 2), batch_size=64, shuffle=False,
                       max_seq_len=5, domains=["stories"], cache=True, prefetch=4)
    def producers() -> int:
        return sum(t.name == "gemkd-prefetch" and t.is_alive() for t in threading.enumerate())

    loader = dm.train_dataloader()
    it = iter(loader)
    assert producers() >= 1  # decodes: through the prefetch thread
    first = list(it)
    deadline = time.monotonic() + 5
    while producers() and time.monotonic() < deadline:
        time.sleep(0.02)
    it = iter(loader)
    assert producers() == 0  # served from memory: no producer started
    second = list(it)
    same(first, second)
    assert loader.dataset.epoch == 2


def test_batches_cut_in_an_evaluation_can_train_a_later_student(tiny_data):
    UNITS.clear()
    reader = DatasetReader(tiny_data, days=(0, 2), batch_size=64, max_seq_len=5,
                           domains=["stories"], cache=True)
    with torch.inference_mode():  # as trainer.test runs: the first pass cuts the batches
        list(reader)
    batch = next(iter(reader))
    assert not batch.dense.is_inference()
    weight = torch.ones(batch.dense.shape[1], requires_grad=True)
    (batch.dense @ weight).sum().backward()  # saved for backward: fails on inference tensors
    assert weight.grad is not None

"""Background-thread prefetch: the same batches in the same order, errors where they occurred,
no thread left behind; and a batch already on its device is not rebuilt."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.data.prefetch import ThreadPrefetcher


def _fields(b: Batch) -> dict[str, torch.Tensor]:
    out = {k: getattr(b, k) for k in ("dense", "categorical", "seq_offsets", "labels", "domain",
                                      "example_id", "user_id", "day", "ts")}
    out.update({f"seq.{k}": v for k, v in b.seq_values.items()})
    if b.oracle is not None:
        out["oracle"] = b.oracle
    return out


def _same(a: list[Batch], b: list[Batch]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        fx, fy = _fields(x), _fields(y)
        assert fx.keys() == fy.keys()
        assert x.seq_max_len == y.seq_max_len
        for k in fx:
            assert torch.equal(fx[k], fy[k]), k


@pytest.mark.parametrize("shuffle", [False, True])
def test_prefetch_keeps_order_and_content(tiny_data, shuffle):
    kwargs = dict(train_days=(0, 3), batch_size=300, shuffle=shuffle, seed=5, max_seq_len=7,
                  domains=["stories"])
    plain = AdsDataModule(tiny_data, **kwargs).train_dataloader()
    ahead = AdsDataModule(tiny_data, prefetch=3, **kwargs).train_dataloader()
    for _ in range(2):  # two epochs: a shuffled pass is the same pass with or without prefetch
        _same(list(plain), list(ahead))
    assert plain.dataset.epoch == ahead.dataset.epoch == 2


def test_prefetch_raises_where_the_source_failed():
    def source():
        yield 1
        yield 2
        raise OSError("disk gone")

    it = iter(ThreadPrefetcher(source(), depth=4))
    assert next(it) == 1 and next(it) == 2
    with pytest.raises(OSError, match="disk gone"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def _prefetch_threads() -> int:
    return sum(t.name == "gemkd-prefetch" and t.is_alive() for t in threading.enumerate())


def _wait_for_no_prefetch_thread(before: int) -> None:
    deadline = time.monotonic() + 5
    while _prefetch_threads() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _prefetch_threads() == before


def test_an_abandoned_pass_stops_its_thread():
    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                n += 1
                yield n
        finally:
            closed.set()

    before = _prefetch_threads()
    it = iter(ThreadPrefetcher(endless(), depth=2))
    assert [next(it) for _ in range(5)] == [1, 2, 3, 4, 5]
    it.close()
    _wait_for_no_prefetch_thread(before)
    assert closed.is_set()  # the source generator was closed, its files with it
    it = iter(ThreadPrefetcher(endless(), depth=2))
    next(it)
    del it  # dropped without close(): collected, and the producer stops
    _wait_for_no_prefetch_thread(before)


def test_prefetch_depth_must_be_positive(tiny_data):
    with pytest.raises(ValueError, match="depth"):
        ThreadPrefetcher([], depth=0)
    with pytest.raises(ValueError, match="prefetch"):
        AdsDataModule(tiny_data, prefetch=-1)


def test_batch_to_its_own_device_is_the_batch(tiny_data):
    batch = next(iter(AdsDataModule(tiny_data, train_days=(0, 1), batch_size=64,
                                    shuffle=False).train_dataloader()))
    assert batch.to("cpu") is batch
    moved = batch.to("meta")  # any other device: every tensor moves, a new batch
    assert moved is not batch
    assert all(t.device.type == "meta" for t in _fields(moved).values())

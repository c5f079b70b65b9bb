"""Worker batches handed over as one buffer: the same batches, in the same order, as handed over
tensor by tensor; every field's values, dtype and shape kept."""

from __future__ import annotations

import pickle

import pytest
import torch

from gemkd.transfer.data.datamodule import AdsDataModule, EpochLoader
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.packed import ALIGN, PackedBatch, pack, pack_in_worker, unpack
from tests.transfer.data.test_prefetch import _same


def test_pack_round_trip_keeps_every_field(tiny_data):
    reader = DatasetReader(tiny_data, days=(0, 1), batch_size=300, max_seq_len=9)
    batches = list(reader)[:3]
    batches[0].meta["note"] = "kept"
    packed = [pack(b) for b in batches]
    assert all(p.buffer.dtype == torch.uint8 and p.buffer.dim() == 1 for p in packed)
    # one buffer: every tensor of the batch is a view of it, each aligned
    for p in packed:
        assert all(offset % ALIGN == 0 for *_, offset in p.slots)
        assert {key for name, key, *_ in p.slots if name == "seq_values"} == set(
            batches[0].seq_values)
    back = [p.unpack() for p in packed]
    _same(batches, back)
    for b, u in zip(batches, back, strict=True):
        for x, y in zip(b._tensors(), u._tensors(), strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape
        assert _one_storage(u)
    assert back[0].meta == {"note": "kept"} and back[0].oracle is not None
    # through pickle (what a worker's queue does) and back
    _same(batches, [pickle.loads(pickle.dumps(p)).unpack() for p in packed])
    assert pack_in_worker(7) == 7 and unpack("x") == "x"


def test_a_packed_batch_moves_in_one_copy(tiny_data):
    batch = next(iter(DatasetReader(tiny_data, days=(0, 1), batch_size=200)))
    p = pack(batch)
    got = p.unpack()
    assert got.__dict__["_packed"] is p and "_packed" not in pickle.loads(pickle.dumps(got)
                                                                          ).__dict__
    moved = p.move(got, torch.device("cpu"))  # (the same buffer: the mechanics, with values)
    assert moved is not None and _one_storage(moved)
    _same([batch], [moved])
    on_meta = got.to("meta")  # another device: one buffer moved, the views rebuilt there
    assert on_meta.dense.device.type == "meta" and on_meta.__dict__["_packed"].buffer.is_meta
    for x, y in zip(batch._tensors(), on_meta._tensors(), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
    assert on_meta.seq_max_len == batch.seq_max_len
    # a consumer replaced a field: no longer the buffer's views, moved tensor by tensor
    got.labels = got.labels.clone()
    assert p.move(got, torch.device("meta")) is None
    tensor_by_tensor = got.to("meta")
    assert "_packed" not in tensor_by_tensor.__dict__ and tensor_by_tensor.labels.is_meta


@pytest.mark.gpu
def test_a_pinned_packed_batch_on_cuda_equals_its_tensor_by_tensor_move(tiny_data):
    batch = next(iter(DatasetReader(tiny_data, days=(0, 1), batch_size=200)))
    got = pack(batch).pin_memory().unpack()
    assert got.dense.is_pinned()
    one, each = got.to("cuda"), batch.to("cuda")
    torch.cuda.synchronize()
    assert _one_storage(one)
    _same([each.to("cpu")], [one.to("cpu")])


def test_pack_without_histories_or_oracle(tiny_data):
    reader = DatasetReader(tiny_data, days=(0, 1), batch_size=128, sequence=[], oracle=False)
    batch = next(iter(reader))
    back = pack(batch).unpack()
    assert back.seq_values == {} and back.oracle is None
    _same([batch], [back])
    assert isinstance(pack(batch), PackedBatch)


@pytest.mark.parametrize("shuffle", [False, True])
def test_workers_yield_the_batches_they_yielded_tensor_by_tensor(tiny_data, shuffle):
    kwargs = dict(train_days=(0, 3), batch_size=500, shuffle=shuffle, seed=3, max_seq_len=12)
    dm = AdsDataModule(tiny_data, num_workers=2, pin_memory=False, **kwargs)
    packed = dm.train_dataloader()
    plain = EpochLoader(dm.reader("train", shuffle), batch_size=None, num_workers=2,
                        prefetch_factor=4, pack=False)
    assert packed.collate_fn is pack_in_worker and plain.collate_fn is not pack_in_worker
    for _ in range(2):  # two epochs: each pass shuffled by its own epoch, the same either way
        got, want = list(packed), list(plain)
        assert got and not any(isinstance(b, PackedBatch) for b in got)
        assert all(_one_storage(b) for b in got) and not _one_storage(want[0])
        _same(want, got)
    assert packed.dataset.epoch == plain.dataset.epoch == 2


def test_pin_memory_defaults_to_cuda_being_there(tiny_data):
    dm = AdsDataModule(tiny_data, train_days=(0, 1), num_workers=1)
    assert dm.train_dataloader().pin_memory == torch.cuda.is_available()
    assert not AdsDataModule(tiny_data, train_days=(0, 1), pin_memory=False
                             ).train_dataloader().pin_memory


def _one_storage(batch) -> bool:
    """Whether every tensor of ``batch`` is a view of one buffer."""
    return len({t.untyped_storage().data_ptr() for t in batch._tensors()}) == 1

"""The reader returns exactly the stored rows as jagged batches, however it is sliced."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
import torch
from torch.utils.data import DataLoader

from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.errors import DataError


def _table(root, days=None):
    files = sorted(root.glob("day=*/*.parquet"), key=lambda p: int(p.parent.name[4:]))
    if days is not None:
        files = [f for f in files if days[0] <= int(f.parent.name[4:]) < days[1]]
    return ds.dataset([str(f) for f in files], format="parquet").to_table()


def _concat(batches):
    ids = torch.cat([b.example_id for b in batches]).numpy()
    lengths = torch.cat([b.seq_lengths for b in batches]).numpy()
    items = torch.cat([b.seq_values["hist_item_id"] for b in batches]).numpy()
    return ids, lengths, items


def test_batches_reproduce_the_table(tiny_data):
    reader = DatasetReader(tiny_data, batch_size=1000)
    batches = list(reader)
    t = _table(tiny_data)
    ids, lengths, items = _concat(batches)
    assert np.array_equal(ids, t["example_id"].to_numpy())
    assert np.array_equal(lengths, pc.list_value_length(t["hist_item_id"]).to_numpy())
    assert np.array_equal(items, pc.list_flatten(t["hist_item_id"]).to_numpy())
    b = batches[0]
    s = reader.schema
    assert b.dense.shape == (1000, len(s.dense)) and b.dense.dtype == torch.float32
    assert b.categorical.shape == (1000, len(s.categorical))
    assert b.labels.shape == (1000, 3) and b.oracle.shape == (1000, 3)
    assert b.seq_offsets.shape == (1001,) and int(b.seq_offsets[0]) == 0
    assert b.seq_max_len == int(b.seq_lengths.max())
    cat = s.categorical.index(next(f for f in s.categorical if f.name == "ad_id"))
    assert np.array_equal(b.categorical[:, cat].numpy(), t["ad_id"].to_numpy()[:1000])
    assert np.array_equal(b.labels[:, 0].numpy(), t["click"].to_numpy()[:1000])
    assert np.allclose(b.dense[:, 0].numpy(), t["bid"].to_numpy()[:1000])


def test_day_range_and_projection(tiny_data):
    reader = DatasetReader(tiny_data, days=(2, 4), batch_size=512, categorical=["ad_id"],
                           dense=[], sequence=["hist_category"], tasks=["click"],
                           oracle=False)
    batches = list(reader)
    t = _table(tiny_data, (2, 4))
    ids, _, _ = zip(*[(b.example_id, 0, 0) for b in batches], strict=True)
    assert np.array_equal(torch.cat(ids).numpy(), t["example_id"].to_numpy())
    b = batches[0]
    assert b.categorical.shape[1] == 1 and b.dense.shape[1] == 0
    assert list(b.seq_values) == ["hist_category"] and b.oracle is None
    assert set(torch.cat([x.day for x in batches]).tolist()) == {2, 3}
    with pytest.raises(DataError, match="unknown task 'ctr'"):
        DatasetReader(tiny_data, tasks=["ctr"])
    with pytest.raises(DataError, match=r"no days in \[50, 60\)"):
        DatasetReader(tiny_data, days=(50, 60))


def test_keep_most_recent_events(tiny_data):
    full = next(iter(DatasetReader(tiny_data, batch_size=4000)))
    cut = next(iter(DatasetReader(tiny_data, batch_size=4000, max_seq_len=5)))
    assert int(cut.seq_lengths.max()) <= 5
    assert torch.equal(cut.seq_lengths, full.seq_lengths.clamp(max=5))
    o_full, o_cut = full.seq_offsets, cut.seq_offsets
    for i in torch.nonzero(full.seq_lengths > 5)[:20, 0].tolist():
        tail = full.seq_values["hist_item_id"][o_full[i + 1] - 5:o_full[i + 1]]
        assert torch.equal(cut.seq_values["hist_item_id"][o_cut[i]:o_cut[i + 1]], tail)


def test_shuffle_is_seeded_and_complete(tiny_data):
    def order(seed, epoch):
        r = DatasetReader(tiny_data, batch_size=700, shuffle=True, seed=seed)
        r.set_epoch(epoch)
        return _concat(list(r))

    a, b, c = order(1, 0), order(1, 0), order(1, 1)
    assert np.array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    plain = _concat(list(DatasetReader(tiny_data, batch_size=700)))
    assert np.array_equal(np.sort(a[0]), plain[0])
    # histories travel with their rows
    by_id = dict(zip(plain[0], plain[1], strict=True))
    assert all(by_id[i] == n for i, n in zip(a[0][:500], a[1][:500], strict=True))


def test_workers_and_ranks_partition_the_rows(tiny_data):
    t = _table(tiny_data)
    loader = DataLoader(DatasetReader(tiny_data, batch_size=1000), batch_size=None,
                        num_workers=2)
    ids = np.sort(torch.cat([b.example_id for b in loader]).numpy())
    assert np.array_equal(ids, t["example_id"].to_numpy())
    parts = [torch.cat([b.example_id for b in DatasetReader(tiny_data, batch_size=1000,
                                                             rank=r, world_size=2)]).numpy()
             for r in range(2)]
    assert not set(parts[0]) & set(parts[1])
    assert len(parts[0]) + len(parts[1]) == t.num_rows


def test_datamodule_splits(tiny_data):
    dm = AdsDataModule(tiny_data, train_days=(0, 4), val_days=(4, 5), test_days=(5, 6),
                       batch_size=2048, seed=3)
    train = [b.day for b in dm.train_dataloader()]
    assert set(torch.cat(train).tolist()) == {0, 1, 2, 3}
    assert set(torch.cat([b.day for b in dm.val_dataloader()]).tolist()) == {4}
    assert set(torch.cat([b.day for b in dm.test_dataloader()]).tolist()) == {5}
    loader = dm.train_dataloader()
    first = torch.cat([b.example_id for b in loader])
    second = torch.cat([b.example_id for b in loader])
    assert not torch.equal(first, second)  # a new shuffle each epoch
    assert torch.equal(first.sort().values, second.sort().values)
    moved = next(iter(dm.val_dataloader())).to("cpu")
    assert moved.seq_offsets.dtype == torch.int64


def test_domain_filter_keeps_one_surface(tiny_data):
    reader = DatasetReader(tiny_data, batch_size=500, domains=["stories"])
    batches = list(reader)
    t = _table(tiny_data)
    keep = t["domain"].to_numpy() == 1
    ids, lengths, items = _concat(batches)
    assert np.array_equal(ids, t["example_id"].to_numpy()[keep])
    assert np.array_equal(lengths, pc.list_value_length(t["hist_item_id"]).to_numpy()[keep])
    flat = t.filter(pa.array(keep))["hist_item_id"]
    assert np.array_equal(items, pc.list_flatten(flat).to_numpy())
    assert all(b.domain.eq(1).all() for b in batches)
    with pytest.raises(DataError, match="unknown domain 'reels'"):
        DatasetReader(tiny_data, domains=["reels"])

"""``validate``'s full pass holds one row group at a time: when the reader starts on a row
group, nothing of the previous one is still allocated (DESIGN §2.2; the figures in
docs/notes/2026-12-04-store-scale-2.md)."""

from __future__ import annotations

import gc

import pyarrow as pa

from gemkd.transfer.data.audit import validate_dataset
from gemkd.transfer.data.dataset_reader import DatasetReader


def test_validate_pass_keeps_no_earlier_row_group(tiny_data, monkeypatch):
    at_load: list[int] = []
    load = DatasetReader._load

    def spy(self, unit, pf):
        at_load.append(pa.total_allocated_bytes())
        return load(self, unit, pf)

    monkeypatch.setattr(DatasetReader, "_load", spy)
    gc.collect()
    base = pa.total_allocated_bytes()  # what other tests' caches hold
    reader = validate_dataset(tiny_data)
    assert len(at_load) == len(reader.units) > 2
    # a loop variable holding the last batch (views of its row group's Arrow buffers) would
    # leave the previous row group allocated here
    assert max(at_load) <= base


def test_a_held_batch_keeps_its_row_group(tiny_data, monkeypatch):
    """The spy above can see what it guards against: a consumer that keeps the last batch."""
    at_load: list[int] = []
    load = DatasetReader._load

    def spy(self, unit, pf):
        at_load.append(pa.total_allocated_bytes())
        return load(self, unit, pf)

    monkeypatch.setattr(DatasetReader, "_load", spy)
    gc.collect()
    base = pa.total_allocated_bytes()
    for _batch in DatasetReader(tiny_data, batch_size=65536):
        pass
    assert at_load[0] <= base < min(at_load[1:])

"""Streamed reads of a store: row groups in read order, the compressor's bounded sample."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gemkd.transfer.store import TeacherStore
from gemkd.transfer.store.sample import sample_embeddings
from tests.transfer.store.helpers import make_rows, write_store


@pytest.fixture
def store(tmp_path) -> TeacherStore:
    write_store(tmp_path / "s", make_rows(500, days=(2, 3, 4, 5)), rows_per_shard=128,
                row_group_rows=32)
    return TeacherStore(tmp_path / "s")


@pytest.mark.parametrize("days", [None, (3, 5)])
def test_row_groups_concatenate_to_read(store, days):
    groups = list(store.iter_row_groups(days, ["example_id", "emb"]))
    assert len(groups) > 4 and max(g.num_rows for g in groups) <= 32
    assert pa.concat_tables(groups).equals(store.read(days, ["example_id", "emb"]))


def test_sample_under_the_cap_is_the_whole_read(store):
    full = store.embeddings(store.read((3, 5)))
    np.testing.assert_array_equal(sample_embeddings(store, (3, 5), len(full), seed=0), full)


def test_sample_over_the_cap(store):
    full = store.embeddings(store.read((3, 5)))
    a = sample_embeddings(store, (3, 5), 100, seed=1)
    assert a.shape == (100, full.shape[1])
    pos = [int(np.flatnonzero((full == row).all(axis=1))[0]) for row in a]
    assert len(set(pos)) == 100 and pos == sorted(pos)  # distinct rows, in store order
    np.testing.assert_array_equal(sample_embeddings(store, (3, 5), 100, seed=1), a)
    assert not np.array_equal(sample_embeddings(store, (3, 5), 100, seed=2), a)
    with pytest.raises(ValueError, match="max_rows must be >= 1"):
        sample_embeddings(store, None, 0, seed=0)

"""The pair store round-trips and proves itself; a hit reads its vector, a miss its fallback."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gemkd.transfer.errors import StoreError
from gemkd.transfer.solaris import PairLookup, PairStore, write_pair_store

DAY = np.array([5, 5, 5, 6])
USER = np.array([1, 1, 2, 1])
ITEM = np.array([10, 11, 10, 10])
VEC = np.array([[1, 0], [3, 2], [5, 4], [7, 7]], dtype=np.float32)


def test_round_trip_and_checks(tmp_path):
    out = write_pair_store(tmp_path / "p", DAY, USER, ITEM, np.zeros(4, int), VEC,
                           {"layer": "trunk"})
    store = PairStore(out)
    d, u, i, v = store.read()
    assert store.dim == 2 and store.meta["layer"] == "trunk"
    assert d.tolist() == [5, 5, 5, 6] and u.tolist() == [1, 1, 2, 1]
    np.testing.assert_array_equal(v, VEC)
    (out / "pairs.parquet").write_bytes(b"x")
    with pytest.raises(StoreError, match="sha256"):
        PairStore(out)
    with pytest.raises(StoreError, match="twice"):
        write_pair_store(tmp_path / "q", [5, 5], [1, 1], [10, 10], [0, 0], VEC[:2],
                         {"layer": "trunk"})
    info = json.loads((out / "pairs.json").read_text())
    assert info["rows"] == 4


@pytest.mark.parametrize("fallback, expect", [
    ("user_mean", [2.0, 1.0]),   # user 1's day-5 vectors (1,0), (3,2)
    ("item_mean", [3.0, 2.0]),   # item 10's day-5 vectors (1,0), (5,4)
    ("zero", [0.0, 0.0]),
])
def test_hit_uses_the_vector_and_a_miss_the_fallback(fallback, expect):
    lookup = PairLookup(DAY, USER, ITEM, VEC, fallback=fallback)
    # rows: a hit (5,1,11), a miss (5,1,12), a hit (6,1,10), a miss with no day 7 vectors
    f = lookup.lookup(np.array([5, 5, 6, 7]), np.array([1, 1, 1, 1]),
                      np.array([11, 12, 10, 10])).numpy()
    assert f.shape == (4, 3)
    np.testing.assert_array_equal(f[0], [3, 2, 0])      # hit: the vector, flag 0
    np.testing.assert_array_equal(f[2], [7, 7, 0])      # hit on day 6
    if fallback == "item_mean":  # item 12 has no vector on day 5: zeros
        np.testing.assert_array_equal(f[1], [0, 0, 1])
    else:
        np.testing.assert_array_equal(f[1], [*expect, 1])
    np.testing.assert_array_equal(f[3], [0, 0, 1])      # day 7: nothing precomputed


def test_item_mean_on_a_miss():
    lookup = PairLookup(DAY, USER, ITEM, VEC, fallback="item_mean")
    f = lookup.lookup([5], [3], [10]).numpy()  # user 3 never precomputed; item 10 was
    np.testing.assert_array_equal(f[0], [3, 2, 1])


def test_unknown_fallback():
    with pytest.raises(ValueError, match="fallback"):
        PairLookup(DAY, USER, ITEM, VEC, fallback="nearest")


def test_lookups_of_one_store_are_equal_so_a_pack_shares_one(tmp_path):
    """A pack's members each read the run's pair store; their lookups must compare equal (the
    pack's template serves them all), and differ when the fallback or the store does."""
    out = write_pair_store(tmp_path / "p", DAY, USER, ITEM, np.zeros(4, int), VEC,
                           meta={"layer": "trunk"})
    store = PairStore(out)
    a, b = PairLookup.from_store(store), PairLookup.from_store(store)
    assert a == b and hash(a) == hash(b)
    assert a != PairLookup.from_store(store, fallback="zero")
    other = write_pair_store(tmp_path / "q", DAY, USER, ITEM, np.zeros(4, int), VEC + 1,
                             meta={"layer": "trunk"})
    assert a != PairLookup.from_store(PairStore(other))
    assert PairLookup(DAY, USER, ITEM, VEC) != PairLookup(DAY, USER, ITEM, VEC)  # no source


def test_a_process_reads_and_indexes_one_store_once_per_fallback(tmp_path, monkeypatch):
    """The members of a pack (and a lag's later runs) share one lookup of the opened store: one
    read of the file, not one per member; another fallback or another opened store reads it
    again, and the lookup goes with its store."""
    import gc

    from gemkd.adapters.methods import solaris

    out = write_pair_store(tmp_path / "p", DAY, USER, ITEM, np.zeros(4, int), VEC,
                           meta={"layer": "trunk"})
    store = PairStore(out)
    reads = []
    real = PairStore.read
    monkeypatch.setattr(PairStore, "read", lambda self: reads.append(1) or real(self))
    a, b = solaris.shared_lookup(store, "user_mean"), solaris.shared_lookup(store, "user_mean")
    assert a is b and len(reads) == 1
    assert solaris.shared_lookup(store, "zero") is not a and len(reads) == 2
    again = PairStore(out)
    assert solaris.shared_lookup(again, "user_mean") == a and len(reads) == 3
    n = len(solaris._LOOKUPS)
    del store, again
    gc.collect()
    assert len(solaris._LOOKUPS) == n - 2

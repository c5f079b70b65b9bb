"""An as-of index scoped to a student's days (a row group of the code store at a time, the
days' codes and each user's latest before them) answers every lookup inside its days as the
whole store's index does, bit for bit, holds fewer rows, and refuses lookups outside them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gemkd.transfer.repr_features import AsOfCodes, CodeStore, quantize_codes, write_code_store
from gemkd.transfer.repr_features.asof_scope import scope_bounds


def _store(tmp_path, rng, m=3000, n_users=40, n_days=10, bits=8, row_group=250):
    """Days cut by equal counts of time-sorted rows (as the importer's buckets), so rows of
    one second can fall on both sides of a day boundary; heavy users span row groups."""
    ts = np.sort(rng.integers(0, 400, m)) * 60 + 1_700_000_000
    day = (np.arange(m) * n_days // m).astype(np.int32)
    uid = rng.zipf(1.5, m) % n_users * 13 + 5
    eid = rng.permutation(m).astype(np.int64)
    codes = quantize_codes(rng.uniform(-1, 1, (m, 6)), bits)
    write_code_store(tmp_path / "codes", eid, uid, ts, day, codes, bits, 6,
                     {"teacher_version": "v"}, row_group_size=row_group)
    return CodeStore(tmp_path / "codes"), {"ts": ts, "day": day, "user_id": uid}


def _queries(rng, w, days, n=400):
    """Examples of the days (their users and seconds, and a user the store lacks)."""
    rows = np.flatnonzero((w["day"] >= days[0]) & (w["day"] < days[1]))
    pick = rng.choice(rows, n)
    u = w["user_id"][pick].copy()
    u[::37] = 10**9
    return u, w["ts"][pick]


@pytest.mark.parametrize("bits, max_events, days", [
    (8, 3, (4, 7)), (8, 50, (4, 7)), (4, 5, (0, 3)), (8, 5, (7, 10)), (8, 2, (5, 6))])
def test_scoped_index_answers_as_the_whole_store(tmp_path, bits, max_events, days):
    rng = np.random.default_rng(max_events + days[0])
    store, w = _store(tmp_path, rng, bits=bits)
    whole = AsOfCodes(store, max_events=max_events)
    scoped = AsOfCodes(store, max_events=max_events, days=days)
    assert 0 < len(scoped) < len(whole)
    u, t = _queries(rng, w, days)
    for lo in range(0, len(u), 128):  # batches, as a student's
        v0, o0 = whole.lookup(u[lo:lo + 128], t[lo:lo + 128])
        v1, o1 = scoped.lookup(u[lo:lo + 128], t[lo:lo + 128])
        assert torch.equal(o0, o1) and torch.equal(v0, v1)
        assert int(o0[-1]) > 0
        m0 = whole.lookup_mean(u[lo:lo + 128], t[lo:lo + 128])
        m1 = scoped.lookup_mean(u[lo:lo + 128], t[lo:lo + 128])
        assert torch.equal(m0, m1)


def test_scope_keeps_the_days_and_a_tail_per_user(tmp_path):
    rng = np.random.default_rng(7)
    store, w = _store(tmp_path, rng)
    lo, hi = scope_bounds(store, (4, 7))
    assert lo == w["ts"][w["day"] < 4].max() and hi == w["ts"][w["day"] >= 7].min()
    scoped = AsOfCodes(store, max_events=3, days=(4, 7))
    inside = int(((w["ts"] >= lo) & (w["ts"] < hi)).sum())
    users_before = len(np.unique(w["user_id"][w["ts"] < lo]))
    # at most twice max_events per user before lo (a user spanning two row groups)
    assert inside < len(scoped) <= inside + 2 * 3 * users_before


def test_scoped_index_refuses_lookups_outside_its_days(tmp_path):
    rng = np.random.default_rng(3)
    store, w = _store(tmp_path, rng)
    scoped = AsOfCodes(store, max_events=5, days=(4, 7))
    lo, hi = scope_bounds(store, (4, 7))
    u = np.array([5, 5])
    with pytest.raises(ValueError, match=r"lookup at ts .* outside the index.s days \[4, 7\]"):
        scoped.lookup(u, np.array([lo, lo - 1]))
    with pytest.raises(ValueError, match="outside the index's days"):
        scoped.lookup_mean(u, np.array([hi + 1, hi]))
    scoped.lookup(u, np.array([lo, hi]))  # both ends are inside


def test_days_beyond_the_store_keep_what_is_there(tmp_path):
    rng = np.random.default_rng(4)
    store, w = _store(tmp_path, rng)
    assert scope_bounds(store, (0, 99)) == (None, None)
    assert len(AsOfCodes(store, max_events=5, days=(0, 99))) == len(AsOfCodes(store, 5))

"""StreamJoin: the student's join row group by row group equals TeacherJoin bit for bit inside
its scope, reads each row group of a time-ordered pass once and keeps a bounded cache."""

from __future__ import annotations

import numpy as np
import pytest

from gemkd.transfer.errors import StoreError
from gemkd.transfer.store import TeacherJoin, TeacherStore
from gemkd.transfer.store.stream_join import StreamJoin
from tests.transfer.store.helpers import make_rows, write_store


def _time_ordered(n: int, seed: int = 0) -> dict:
    """Rows as an export writes them: dense ids in time order, days ascending, mixed domains."""
    rows = make_rows(n, seed=seed, days=(2, 3, 4, 5, 6))
    rows["example_id"] = np.arange(n, dtype=np.int64) + 1000
    rows["day"] = np.sort(rows["day"])
    return rows


def _compare(a, b) -> None:
    np.testing.assert_array_equal(a.found, b.found)
    np.testing.assert_array_equal(a.logits, b.logits)
    if a.emb is not None or b.emb is not None:
        np.testing.assert_array_equal(a.emb, b.emb)


@pytest.mark.parametrize("emb_dtype", ["float16", "int8"])
@pytest.mark.parametrize("ordered", [True, False])
def test_equals_teacher_join_in_scope(tmp_path, emb_dtype, ordered):
    rows = _time_ordered(600) if ordered else make_rows(600, days=(2, 3, 4, 5, 6))
    write_store(tmp_path / "s", rows, emb_dtype=emb_dtype, rows_per_shard=128,
                row_group_rows=32)
    store = TeacherStore(tmp_path / "s")
    days, domain = (3, 6), 1
    ref = TeacherJoin(store, days=days, policy="mask", with_emb=True)
    join = StreamJoin(store, days=days, domains=[domain], policy="mask", with_emb=True)
    order = np.argsort(rows["example_id"])
    ids, day, dom = (rows[k][order] for k in ("example_id", "day", "domain"))
    scoped = ids[(day >= days[0]) & (day < days[1]) & (dom == domain)]
    assert len(scoped) > 50
    for lo in range(0, len(scoped), 13):  # the student's batches, in time order
        q = scoped[lo:lo + 13]
        got = join(q)
        assert got.found.all()
        _compare(got, ref(q))
    assert join.coverage == 1.0 and join.requested == len(scoped)
    # ids outside the scope or absent from the store: not found, zeros
    other = ids[(dom != domain) & (day >= days[0]) & (day < days[1])][:5]
    q = np.concatenate([scoped[:3], other, [10**9]])
    got = join(q)
    np.testing.assert_array_equal(got.found, [True] * 3 + [False] * (len(other) + 1))
    assert not got.logits[3:].any() and not got.emb[3:].any()
    np.testing.assert_array_equal(got.logits[:3], ref(scoped[:3]).logits)


def test_time_ordered_pass_reads_each_group_once(tmp_path):
    rows = _time_ordered(2000)
    write_store(tmp_path / "s", rows, rows_per_shard=512, row_group_rows=64)
    store = TeacherStore(tmp_path / "s")
    join = StreamJoin(store, days=(3, 6), policy="error", with_emb=True, cache_groups=2)
    scoped = rows["example_id"][(rows["day"] >= 3) & (rows["day"] < 6)]
    for lo in range(0, len(scoped), 50):
        join(scoped[lo:lo + 50])
        assert len(join._cache) <= 2
    assert join.loads == join.num_groups < 2000 // 64 + 4  # every scoped group, once
    # a second student of the scope shares the row-group table, with its own counts
    other = join.fresh()
    assert other.requested == 0 and other.coverage == 1.0
    _compare(other(scoped[:40]), join(scoped[:40]))
    join.release()  # shared: the copy's cache goes too, and refills on demand
    assert not other._cache
    _compare(other(scoped[-40:]), TeacherJoin(store, days=(3, 6), with_emb=True)(scoped[-40:]))


def test_error_policy_and_bad_values(tmp_path):
    rows = _time_ordered(200)
    write_store(tmp_path / "s", rows, row_group_rows=32)
    join = StreamJoin(TeacherStore(tmp_path / "s"), days=(2, 4), policy="error")
    missing = int(rows["example_id"][rows["day"] >= 4][0])
    with pytest.raises(StoreError, match=rf"days \[2, 4\)\): example_id {missing} has no "):
        join(np.array([rows["example_id"][0], missing]))
    with pytest.raises(StoreError, match="policy 'merge'"):
        StreamJoin(TeacherStore(tmp_path / "s"), policy="merge")  # type: ignore[arg-type]
    rows["logits"][150, 1] = np.nan
    write_store(tmp_path / "bad", rows, row_group_rows=32, check_finite=False)
    join = StreamJoin(TeacherStore(tmp_path / "bad"), policy="mask")
    join(rows["example_id"][:10])  # rows of clean row groups are served
    with pytest.raises(StoreError, match=r"part-r000-\d+\.parquet: column 'logit_conversion' "
                                         r"row \d+ is not finite"):
        join(rows["example_id"][145:155])


def test_a_join_in_use_is_deep_copied_and_pickled(tmp_path):
    """A weight average deep-copies the module holding the join (after it has opened files);
    a copy shares the cache, a pickle starts without it, and both look up the same rows."""
    import copy
    import pickle

    rows = _time_ordered(600)
    write_store(tmp_path / "s", rows, rows_per_shard=128, row_group_rows=32)
    join = StreamJoin(TeacherStore(tmp_path / "s"), days=(3, 6), policy="mask", with_emb=True)
    q = rows["example_id"][(rows["day"] >= 3) & (rows["day"] < 6)][:40]
    want = join(q)
    assert join._open and join._cache  # files open, row groups cached
    twin = copy.deepcopy({"join": join})["join"]
    assert twin is not join and twin._cache is join._cache
    back = pickle.loads(pickle.dumps(join))
    assert not back._cache and not back._open
    for other in (twin, back):
        _compare(other(q), want)

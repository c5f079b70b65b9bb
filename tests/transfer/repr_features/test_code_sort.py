"""The streamed code store writer (an external sort) writes the bytes the whole-array writer
writes, whatever the chunks' order and sizes, buckets and row groups."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gemkd.transfer.errors import StoreError
from gemkd.transfer.repr_features import (
    CODES_FILE,
    CODES_JSON,
    CodeStore,
    code_sort,
    write_code_store,
)
from gemkd.transfer.repr_features.code_sort import write_code_store_streamed

META = {"teacher_version": "t" * 64, "r2": {"8": 0.5}}


def _rows(rng, m, n_users, bits=8, code_dim=5, user_lo=0):
    nbytes = code_dim if bits == 8 else (code_dim + 1) // 2
    return {"example_id": rng.permutation(m).astype(np.int64) * 3 + 7,
            "user_id": rng.integers(user_lo, user_lo + n_users, m),
            "ts": rng.integers(0, m // 4 + 1, m),  # ties within a user: example_id orders them
            "day": rng.integers(0, 9, m).astype(np.int32),
            "codes_q": rng.integers(-127, 128, (m, nbytes)).astype(np.int8)}


def _chunks(w, sizes):
    lo = 0
    for n in sizes:
        yield tuple(w[k][lo:lo + n] for k in ("example_id", "user_id", "ts", "day", "codes_q"))
        lo += n


def _files(path):
    return (path / CODES_FILE).read_bytes(), json.loads((path / CODES_JSON).read_text())


@pytest.mark.parametrize("bits, bucket_rows, row_group, n_users, user_lo", [
    (8, 100, 64, 40, 0),         # many buckets, split twice, row groups across buckets
    (4, 1000, 1 << 20, 300, 5),  # one bucket, one row group
    (8, 50, 77, 3, 0),           # a few users, each larger than a bucket: split by time
    (4, 64, 100, 1, 9),          # one user
    (8, 90, 128, 500, -2**62),   # ids far apart and negative: unsigned offsets
])
def test_streamed_bytes_equal_whole_write(tmp_path, bits, bucket_rows, row_group, n_users,
                                          user_lo):
    rng = np.random.default_rng(bucket_rows)
    m = 1500
    w = _rows(rng, m, n_users, bits=bits, user_lo=user_lo)
    if user_lo < 0:
        w["user_id"][::7] = 2**62  # span over 2^63
    want = write_code_store(tmp_path / "whole", *w.values(), bits, 5, META,
                            row_group_size=row_group)
    sizes = rng.integers(1, 400, 20)
    sizes = [*sizes[np.cumsum(sizes) < m], 0]
    sizes.append(m - sum(sizes))
    got = write_code_store_streamed(tmp_path / "streamed", _chunks(w, sizes), bits, 5, META,
                                    bucket_rows=bucket_rows, row_group_size=row_group)
    assert _files(got) == _files(want)
    assert sorted(p.name for p in got.iterdir()) == sorted([CODES_FILE, CODES_JSON])  # no spill
    t = CodeStore(got).read()
    assert t.num_rows == m
    assert CodeStore(got).read().to_pydict() == CodeStore(want).read().to_pydict()


def test_split_is_used_and_bounded(tmp_path, monkeypatch):
    """Buckets never hold more than ``bucket_rows`` rows where users can be split."""
    held = []
    table_of = code_sort.sorted_code_table

    def spy(eid, *rest):
        held.append(len(eid))
        return table_of(eid, *rest)

    monkeypatch.setattr(code_sort, "sorted_code_table", spy)
    rng = np.random.default_rng(0)
    w = _rows(rng, 3000, 1000)
    write_code_store_streamed(tmp_path / "c", _chunks(w, [1000, 1000, 1000]), 8, 5, META,
                              bucket_rows=200)
    assert sum(held) == 3000 and len(held) >= 15 and max(held) <= 200


@pytest.mark.parametrize("n_users, most", [(3, 200), (1, 200)])
def test_heavy_users_are_split_by_time(tmp_path, monkeypatch, n_users, most):
    held = []
    table_of = code_sort.sorted_code_table
    monkeypatch.setattr(code_sort, "sorted_code_table",
                        lambda eid, *rest: held.append(len(eid)) or table_of(eid, *rest))
    w = _rows(np.random.default_rng(5), 3000, n_users)
    write_code_store_streamed(tmp_path / "c", _chunks(w, [3000]), 8, 5, META, bucket_rows=200)
    assert sum(held) == 3000 and max(held) <= most


def test_one_user_one_second_is_sorted_whole(tmp_path):
    rng = np.random.default_rng(6)
    w = _rows(rng, 500, 1)
    w["ts"][:] = 42
    want = write_code_store(tmp_path / "whole", *w.values(), 8, 5, META, row_group_size=64)
    got = write_code_store_streamed(tmp_path / "streamed", _chunks(w, [100, 400]), 8, 5, META,
                                    bucket_rows=50, row_group_size=64)
    assert _files(got) == _files(want)


def test_empty_store_equals_whole_write(tmp_path):
    rng = np.random.default_rng(1)
    w = {k: v[:0] for k, v in _rows(rng, 10, 3).items()}
    want = write_code_store(tmp_path / "whole", *w.values(), 8, 5, META)
    got = write_code_store_streamed(tmp_path / "streamed", iter([]), 8, 5, META)
    assert _files(got) == _files(want)


def test_streamed_refuses_bad_input_and_leaves_nothing(tmp_path):
    rng = np.random.default_rng(2)
    w = _rows(rng, 100, 10)
    w["example_id"][50] = w["example_id"][10]
    w["user_id"][50], w["ts"][50] = w["user_id"][10], w["ts"][10] + 1
    with pytest.raises(StoreError, match="example_id has duplicates"):
        write_code_store_streamed(tmp_path / "dup", _chunks(w, [60, 40]), 8, 5, META)
    assert not (tmp_path / "dup").exists()
    bad = _rows(rng, 10, 3)
    bad["codes_q"] = bad["codes_q"][:, :4]
    with pytest.raises(StoreError, match=r"codes_q must be 1-byte integers \[10, 5\]"):
        write_code_store_streamed(tmp_path / "bad", _chunks(bad, [10]), 8, 5, META)
    with pytest.raises(StoreError, match="teacher_version"):
        write_code_store_streamed(tmp_path / "meta", iter([]), 8, 5, {})
    assert not (tmp_path / "bad").exists() and not (tmp_path / "meta").exists()

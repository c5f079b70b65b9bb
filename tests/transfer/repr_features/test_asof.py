"""As-of join of teacher codes and the code store (DESIGN §5, LoopFM).

The join is checked against a brute-force Python reference on random data with many equal
timestamps; every stored code encodes its own row number, so each returned value can be traced
back to the row it came from (same user, strictly earlier, never the example itself).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gemkd.transfer.errors import StoreError
from gemkd.transfer.ops import segment_mean
from gemkd.transfer.repr_features import (
    AsOfCodes,
    CodeStore,
    code_nbytes,
    dequantize_codes,
    has_history,
    pool_mean,
    write_code_store,
)

LEVELS = {8: 127, 4: 7}


def _traceable_codes(m: int, bits: int, code_dim: int) -> np.ndarray:
    """Float codes whose quantised digits spell the row number (base 2·levels+1), unique."""
    base = 2 * LEVELS[bits] + 1
    digits = np.zeros((m, code_dim), dtype=np.int64)
    r = np.arange(m)
    for j in range(code_dim):
        digits[:, j] = r % base
        r = r // base
    assert (r == 0).all(), "code_dim too small to make every code unique"
    return (digits - LEVELS[bits]) / LEVELS[bits]


def _row_of(values: np.ndarray, bits: int) -> np.ndarray:
    base = 2 * LEVELS[bits] + 1
    digits = np.rint(values * LEVELS[bits]).astype(np.int64) + LEVELS[bits]
    return (digits * base ** np.arange(values.shape[1])).sum(1)


def _world(rng: np.random.Generator, m: int, n_users: int, n_ts: int) -> dict[str, np.ndarray]:
    return {"example_id": rng.permutation(10 * m)[:m].astype(np.int64) + 1000,
            "user_id": rng.integers(0, n_users, m) * 7919 + 3,
            "ts": rng.integers(0, n_ts, m) * 60 + 1_700_000_000,
            "day": rng.integers(0, 3, m).astype(np.int32)}


def _store(tmp_path, w, bits=8, code_dim=5, name="codes"):
    from gemkd.transfer.repr_features import quantize_codes

    codes = _traceable_codes(len(w["example_id"]), bits, code_dim)
    q = quantize_codes(codes, bits)
    write_code_store(tmp_path / name, w["example_id"], w["user_id"], w["ts"], w["day"], q, bits,
                     code_dim, {"teacher_version": "abc123", "layer": "trunk"})
    return CodeStore(tmp_path / name)


def _reference(w, user, t, max_events) -> list[int]:
    """Rows (by original index) of ``user`` with ts < t, most recent ``max_events``, oldest first;
    equal timestamps ordered by example_id (the store's documented tie order)."""
    rows = [i for i in range(len(w["ts"])) if w["user_id"][i] == user and w["ts"][i] < t]
    rows.sort(key=lambda i: (w["ts"][i], w["example_id"][i]))
    return rows[-max_events:] if rows else []


@pytest.mark.parametrize("bits,max_events", [(8, 4), (4, 50), (8, 1)])
def test_asof_matches_brute_force_with_ties(tmp_path, bits, max_events):
    rng = np.random.default_rng(bits * 100 + max_events)
    w = _world(rng, m=500, n_users=12, n_ts=20)  # ~40 events per user over 20 distinct seconds
    asof = AsOfCodes(_store(tmp_path, w, bits), max_events=max_events)
    # queries: every stored example at its own time (its own code must never come back), plus
    # unseen users and times before / after everything
    qu = np.concatenate([w["user_id"], [1, 3, 3, w["user_id"][0]]])
    qt = np.concatenate([w["ts"], [w["ts"].max() + 1, 0, 2**40, w["ts"].min()]])
    qe = np.concatenate([w["example_id"], [-1, -1, -1, -1]])
    values, offsets = asof.lookup(torch.from_numpy(qu), torch.from_numpy(qt))
    assert values.dtype == torch.float32 and offsets.dtype == torch.int64
    assert offsets.shape == (len(qu) + 1,) and offsets[0] == 0 and offsets[-1] == len(values)
    rows = _row_of(values.numpy(), bits)
    off = offsets.numpy()
    n_nonempty = 0
    for b in range(len(qu)):
        got = rows[off[b]:off[b + 1]].tolist()
        assert got == _reference(w, qu[b], qt[b], max_events), b
        assert all(w["ts"][i] < qt[b] and w["user_id"][i] == qu[b] for i in got)
        assert qe[b] not in {int(w["example_id"][i]) for i in got}
        n_nonempty += bool(got)
    assert n_nonempty > len(qu) // 2  # the test exercised real histories, not just empties
    # the tie-heavy data really had examples whose same-second neighbours were excluded
    _, counts = np.unique(np.stack([w["user_id"], w["ts"]]), axis=1, return_counts=True)
    assert (counts > 1).sum() > 20


def test_max_events_keeps_most_recent_and_empty_segments(tmp_path):
    w = {"example_id": np.arange(6, dtype=np.int64),
         "user_id": np.array([5, 5, 5, 5, 9, 9]),
         "ts": np.array([10, 20, 30, 40, 100, 100]),
         "day": np.zeros(6, dtype=np.int32)}
    asof = AsOfCodes(_store(tmp_path, w), max_events=2)
    values, offsets = asof.lookup(np.array([5, 5, 5, 9, 9, 42]),
                                  np.array([41, 10, 11, 100, 101, 10**9]))
    assert offsets.tolist() == [0, 2, 2, 3, 3, 5, 5]
    rows = _row_of(values.numpy(), 8).tolist()
    assert rows == [2, 3, 0, 4, 5]  # most recent two, oldest first; ts 100 not before 100
    pooled = pool_mean(values, offsets)
    assert pooled.shape == (6, 5)
    assert torch.equal(pooled[1], torch.zeros(5)) and torch.equal(pooled[5], torch.zeros(5))
    torch.testing.assert_close(pooled[0], values[:2].mean(0))
    assert has_history(offsets).squeeze(1).tolist() == [1, 0, 1, 0, 1, 0]


def test_lookup_is_vectorised_on_a_larger_store(tmp_path):
    rng = np.random.default_rng(0)
    w = _world(rng, m=100_000, n_users=5_000, n_ts=1_000)
    asof = AsOfCodes(_store(tmp_path, w, bits=4, code_dim=5), max_events=10)
    qi = rng.integers(0, 100_000, 4096)
    values, offsets = asof.lookup(w["user_id"][qi], w["ts"][qi])
    lens = np.diff(offsets.numpy())
    assert lens.max() <= 10 and values.shape == (offsets[-1], 5)
    rows = _row_of(values.numpy(), 4)
    seg = np.repeat(np.arange(len(qi)), lens)
    assert (w["ts"][rows] < w["ts"][qi][seg]).all()
    assert (w["user_id"][rows] == w["user_id"][qi][seg]).all()


def test_empty_store(tmp_path):
    w = {k: np.zeros(0, dtype=np.int64) for k in ("example_id", "user_id", "ts", "day")}
    asof = AsOfCodes(_store(tmp_path, w), max_events=3)
    assert len(asof) == 0
    values, offsets = asof.lookup(np.array([1, 2]), np.array([5, 6]))
    assert values.shape == (0, 5) and offsets.tolist() == [0, 0, 0]


# ---- the code store ----------------------------------------------------------------------------
@pytest.mark.parametrize("bits,code_dim", [(8, 6), (4, 5)])
def test_code_store_round_trip(tmp_path, bits, code_dim):
    rng = np.random.default_rng(1)
    w = _world(rng, m=300, n_users=10, n_ts=50)
    store = _store(tmp_path, w, bits, code_dim)
    info = json.loads((tmp_path / "codes" / "codes.json").read_text())
    assert info["bits"] == bits and info["code_dim"] == code_dim and info["rows"] == 300
    assert store.meta == {"teacher_version": "abc123", "layer": "trunk"}
    table = store.read()
    assert table.schema.field("code").type.byte_width == code_nbytes(bits, code_dim)
    assert table.schema.field("day").type == "int32"
    uid, ts = table.column("user_id").to_numpy(), table.column("ts").to_numpy()
    assert (np.lexsort((ts, uid)) == np.arange(300)).all()  # stored in as-of order
    # every row's code came back with its own keys
    rows = _row_of(store.codes(table), bits)
    for k in ("example_id", "user_id", "ts", "day"):
        assert (table.column(k).to_numpy() == w[k][rows]).all()
    q = store.codes_q(table)
    assert q.dtype == np.uint8 and q.shape == (300, code_nbytes(bits, code_dim))
    np.testing.assert_array_equal(dequantize_codes(q, bits, code_dim), store.codes(table))


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_code_store_refuses_tampering(tmp_path):
    rng = np.random.default_rng(2)
    w = _world(rng, m=50, n_users=5, n_ts=10)
    _store(tmp_path, w)
    path = tmp_path / "codes"
    jpath, fpath = path / "codes.json", path / "codes.parquet"
    good_json, good_file = jpath.read_text(), fpath.read_bytes()

    fpath.write_bytes(good_file[:-10] + bytes(10))  # same size, different bytes
    with pytest.raises(StoreError) as e:
        CodeStore(path)
    assert "sha256" in _one_line(e)
    fpath.write_bytes(good_file)

    info = json.loads(good_json)
    info["rows"] = 49
    jpath.write_text(json.dumps(info))
    with pytest.raises(StoreError) as e:
        CodeStore(path)
    assert "49" in _one_line(e)

    del info["bits"]
    jpath.write_text(json.dumps(info))
    with pytest.raises(StoreError) as e:
        CodeStore(path)
    assert "'bits'" in _one_line(e)

    jpath.write_text("{not json")
    with pytest.raises(StoreError) as e:
        CodeStore(path)
    assert "unreadable" in _one_line(e)

    jpath.unlink()
    with pytest.raises(StoreError) as e:
        CodeStore(path)
    assert "codes.json" in _one_line(e)

    jpath.write_text(good_json)
    fpath.unlink()
    with pytest.raises(StoreError) as e:
        CodeStore(path)
    assert "missing" in _one_line(e)


def test_write_code_store_refuses_bad_input(tmp_path):
    w = {"example_id": np.array([1, 2]), "user_id": np.array([1, 1]), "ts": np.array([1, 2]),
         "day": np.array([0, 0])}
    q = np.zeros((2, 4), dtype=np.int8)
    args = (w["example_id"], w["user_id"], w["ts"], w["day"])
    with pytest.raises(StoreError, match="teacher_version"):
        write_code_store(tmp_path / "a", *args, q, 8, 4, {})
    with pytest.raises(StoreError, match="codes_q"):
        write_code_store(tmp_path / "a", *args, q, 4, 4, {"teacher_version": "v"})
    with pytest.raises(StoreError, match="duplicates"):
        write_code_store(tmp_path / "a", np.array([1, 1]), *args[1:], q, 8, 4,
                         {"teacher_version": "v"})
    assert not (tmp_path / "a").exists()
    write_code_store(tmp_path / "a", *args, q, 8, 4, {"teacher_version": "v"})
    with pytest.raises(Exception, match="already exists"):
        write_code_store(tmp_path / "a", *args, q, 8, 4, {"teacher_version": "v"})
    write_code_store(tmp_path / "a", *args, q, 8, 4, {"teacher_version": "w"}, overwrite=True)
    assert CodeStore(tmp_path / "a").meta["teacher_version"] == "w"


def _lookups_match_brute_force(w, asof, max_events) -> None:
    qu = np.concatenate([w["user_id"], [-7, 2**62, w["user_id"].max() + 1]])
    qt = np.concatenate([w["ts"], [w["ts"].max() + 1, w["ts"].min(), w["ts"].max() + 1]])
    values, offsets = asof.lookup(qu, qt)
    rows, off = _row_of(values.numpy(), 8), offsets.numpy()
    for b in range(len(qu)):
        assert rows[off[b]:off[b + 1]].tolist() == _reference(w, qu[b], qt[b], max_events), b


@pytest.mark.parametrize("index", ["dense users", "rank keys"])
def test_user_table_and_rank_keys_match_brute_force(tmp_path, index):
    """Dense user ids take the direct rank table; a store whose time span would overflow the
    offset keys takes the timestamp-rank keys. Unknown and far-off ids find nothing."""
    rng = np.random.default_rng(7)
    w = _world(rng, m=400, n_users=10, n_ts=15)
    w["user_id"] = w["user_id"] // 7919  # 0..9: dense
    if index == "rank keys":
        w["ts"] = (w["ts"] - 1_700_000_000) * (2**60 // 900)  # span * users past 2^62
    asof = AsOfCodes(_store(tmp_path, w), max_events=6)
    assert (asof._uniq_ts is not None) == (index == "rank keys")
    assert asof._rank_of is not None
    _lookups_match_brute_force(w, asof, 6)


def test_lookup_mean_is_pool_mean_of_lookup_bit_for_bit(tmp_path):
    rng = np.random.default_rng(3)
    w = _world(rng, m=3000, n_users=40, n_ts=200)
    asof = AsOfCodes(_store(tmp_path, w, code_dim=6), max_events=25)
    qu = np.concatenate([rng.choice(w["user_id"], 500), [1, -3]])
    qt = np.concatenate([rng.choice(w["ts"], 500) + rng.integers(-60, 60, 500), [0, 10**12]])
    values, offsets = asof.lookup(qu, qt)
    mean = asof.lookup_mean(qu, qt)
    assert mean.dtype == torch.float32 and mean.shape == (len(qu), 6)
    assert torch.equal(mean, pool_mean(values, offsets))
    assert torch.equal(mean, segment_mean(values, offsets))  # the reference kernel
    empty = AsOfCodes(_store(tmp_path, {k: np.zeros(0, dtype=np.int64) for k in w}, name="e"))
    assert torch.equal(empty.lookup_mean(qu[:3], qt[:3]), torch.zeros(3, 5))


def test_lookup_mean_remembers_batches_safely(tmp_path, monkeypatch):
    """A batch asked again (a sweep's next student) is answered from memory: the same values,
    a tensor of its own (a caller writing into it changes nothing kept), bounded in bytes."""
    from gemkd.transfer.repr_features import asof as asof_module

    rng = np.random.default_rng(5)
    w = _world(rng, m=2000, n_users=30, n_ts=100)
    asof = AsOfCodes(_store(tmp_path, w, code_dim=4), max_events=10)
    qu, qt = rng.choice(w["user_id"], 64), rng.choice(w["ts"], 64) + 1
    first = asof.lookup_mean(qu, qt)
    kept = first.clone()
    calls = []
    monkeypatch.setattr(asof, "_segments", lambda *a: calls.append(a) or (None, None))
    first.add_(1.0)  # the caller's own tensor
    again = asof.lookup_mean(torch.from_numpy(qu), torch.from_numpy(qt))  # tensors, same keys
    assert calls == [] and torch.equal(again, kept)
    monkeypatch.undo()
    other = asof.lookup_mean(qu[::-1].copy(), qt[::-1].copy())  # another batch: computed
    assert torch.equal(other, again.flip(0))
    monkeypatch.setattr(asof_module, "MEAN_CACHE_BYTES", 2500)  # room for one batch (~2 kB)
    asof.lookup_mean(qu[:63], qt[:63])
    assert asof._means_bytes <= 2500 and len(asof._means) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pool_mean_equals_segment_mean_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        b = int(torch.randint(1, 30, (1,), generator=g))
        lengths = torch.randint(0, 60, (b,), generator=g) * (torch.rand(b, generator=g) > 0.2)
        offsets = torch.zeros(b + 1, dtype=torch.int64)
        offsets[1:] = lengths.cumsum(0)
        values = (torch.randn(int(offsets[-1]), 4, generator=g) * 50).to(dtype)
        assert torch.equal(pool_mean(values, offsets), segment_mean(values, offsets))

"""Teacher-output store: write → verify → read → join, and every refusal (DESIGN §4)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.errors import StoreError
from gemkd.transfer.store import (
    StoreWriter,
    TeacherJoin,
    TeacherStore,
    weights_hash,
)
from tests.transfer.store.helpers import (
    TASKS,
    E,
    feed,
    make_rows,
    no_leftovers,
    sorted_by_id,
    write_store,
    writer_args,
)


# ---- round trip and manifest -----------------------------------------------------------------
def test_round_trip_float16(store_dir, rows):
    store = TeacherStore(store_dir)
    ids, logits, emb = sorted_by_id(store, store.read())
    o = np.argsort(rows["example_id"])
    np.testing.assert_array_equal(ids, rows["example_id"][o])
    np.testing.assert_array_equal(logits, rows["logits"][o])  # float32 logits are exact
    np.testing.assert_array_equal(emb, rows["emb"][o].astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(emb, rows["emb"][o], rtol=2 ** -10, atol=2 ** -24)
    table = store.read().sort_by("example_id")
    for k in ("day", "domain", "user_id", "ts"):
        np.testing.assert_array_equal(table.column(k).to_numpy(), rows[k][o])


def test_round_trip_int8(tmp_path, rows):
    rows["emb"][5] = 0.0  # an all-zero row: scale 0, codes 0
    write_store(tmp_path / "s", rows, emb_dtype="int8")
    store = TeacherStore(tmp_path / "s")
    table = store.read().sort_by("example_id")
    o = np.argsort(rows["example_id"])
    x = rows["emb"][o]
    absmax = np.abs(x).max(axis=1)
    np.testing.assert_allclose(table.column("emb_scale").to_numpy(), absmax / 127, rtol=1e-6)
    err = np.abs(store.embeddings(table) - x)
    assert (err <= (absmax / 127 * 0.5 + 1e-6)[:, None]).all()
    assert table.schema.field("emb").type == pa.list_(pa.int8(), E)
    np.testing.assert_array_equal(store.logits(table), rows["logits"][o])


def test_manifest_contents(store_dir):
    m = json.loads((store_dir / "manifest.json").read_text())
    assert m["tasks"] == TASKS and m["emb_dtype"] == "float16" and m["emb_dim"] == E
    assert m["trained_until_day"] == 9 and m["layer"] == "trunk" and m["teacher_name"] == "gem"
    assert m["schema_version"] == 1 and m["extra"]["duplicates_removed"] == 0
    assert datetime.fromisoformat(m["created_at"]).utcoffset().total_seconds() == 0
    assert m["total_rows"] == 150 == sum(s["rows"] for s in m["shards"])
    assert [s["rows"] for s in m["shards"]] == [40, 40, 40, 30]
    files = sorted(p.name for p in store_dir.iterdir())
    assert files == ["manifest.json"] + [f"part-r000-{k:05d}.parquet" for k in range(4)]
    for s in m["shards"]:
        data = (store_dir / s["file"]).read_bytes()
        assert s["sha256"] == hashlib.sha256(data).hexdigest()
        assert pq.read_metadata(store_dir / s["file"]).num_rows == s["rows"]
        days = pq.read_table(store_dir / s["file"], columns=["day"]).column(0).to_numpy()
        assert s["days"] == sorted(set(days.tolist()))
    schema = pq.read_schema(store_dir / m["shards"][0]["file"])
    assert [schema.field(c).type for c in schema.names] == [
        pa.int64(), pa.int32(), pa.int16(), pa.int64(), pa.int64(), pa.float32(), pa.float32(),
        pa.float32(), pa.list_(pa.float16(), E)]
    assert schema.names[5:8] == [f"logit_{t}" for t in TASKS]


def test_weights_hash():
    a = torch.nn.Linear(3, 2).state_dict()
    h = weights_hash(a)
    assert re.fullmatch(r"[0-9a-f]{64}", h)
    assert weights_hash(dict(reversed(list(a.items())))) == h  # order of names does not matter
    b = {k: v.clone() for k, v in a.items()}
    b["bias"][0] += 1e-3
    assert weights_hash(b) != h
    assert weights_hash({"w": torch.zeros(2)}) != weights_hash({"w": torch.zeros(2).half()})


def test_manifest_validation(store_dir):
    path = store_dir / "manifest.json"
    good = json.loads(path.read_text())
    cases = [
        ({"schema_version": 2}, "schema_version 2, this gemkd reads 1"),
        ({"emb_dim": "8"}, "'emb_dim' must be int, got str"),
        ({"emb_dtype": "bfloat16"}, "'emb_dtype' is 'bfloat16'"),
        ({"tasks": []}, "'tasks' must be a non-empty list"),
        ({"total_rows": 151}, "total_rows 151 != sum of shard rows 150"),
    ]
    for change, message in cases:
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(StoreError, match=re.escape(message)):
            TeacherStore(store_dir)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "layer"}))
    with pytest.raises(StoreError, match="missing key 'layer'"):
        TeacherStore(store_dir)


# ---- reading ---------------------------------------------------------------------------------
def test_day_filter_and_projection(store_dir, rows):
    store = TeacherStore(store_dir)
    assert store.days == [3, 4, 5]
    t = store.read(days=(4, 6), columns=["example_id", "day", "logit_click"])
    assert t.column_names == ["example_id", "day", "logit_click"]
    keep = rows["day"] >= 4
    assert sorted(t.column("example_id").to_pylist()) == sorted(rows["example_id"][keep])
    assert set(t.column("day").to_pylist()) == {4, 5}
    assert store.read(days=(7, 9)).num_rows == 0
    assert store.read(days=(3, 4), columns=["emb"]).column_names == ["emb"]
    with pytest.raises(StoreError, match="no column 'logit_ctr'"):
        store.read(columns=["logit_ctr"])


def test_day_filter_prunes_shards(tmp_path):
    rows = make_rows(120, days=(1,))
    later = make_rows(120, seed=1, days=(2,), first_id=10_000)
    w = StoreWriter(tmp_path / "s", **writer_args())
    feed(w, rows)
    feed(w, later)
    w.finalize()
    store = TeacherStore(tmp_path / "s")
    assert [s.days for s in store.shards_for((2, 3))] == [[2], [2], [2]]
    assert store.read(days=(2, 3)).num_rows == 120


# ---- join ------------------------------------------------------------------------------------
def test_join_mask_policy_and_coverage(store_dir, rows):
    store = TeacherStore(store_dir)
    join = TeacherJoin(store, policy="mask", with_emb=True)
    rng = np.random.default_rng(3)
    missing = np.array([-5, 1, 10_000_000], dtype=np.int64)  # ids are multiples of 7
    query = rng.permutation(np.concatenate([rows["example_id"][:60], missing]))
    res = join(query)
    expect_found = ~np.isin(query, missing)
    np.testing.assert_array_equal(res.found, expect_found)
    pos = {int(i): k for k, i in enumerate(rows["example_id"])}
    idx = np.array([pos[int(i)] for i in query[expect_found]])
    np.testing.assert_array_equal(res.logits[expect_found], rows["logits"][idx])
    np.testing.assert_array_equal(res.emb[expect_found],
                                  rows["emb"][idx].astype(np.float16).astype(np.float32))
    assert (res.logits[~expect_found] == 0).all() and (res.emb[~expect_found] == 0).all()
    assert res.logits.dtype == np.float32 and res.logits.shape == (63, 3)
    assert join.coverage == pytest.approx(60 / 63)
    join(torch.from_numpy(rows["example_id"][60:97]))  # all found; coverage is cumulative
    assert join.coverage == pytest.approx(97 / 100)


def test_fresh_join_shares_the_index_not_the_counts(store_dir, rows):
    from gemkd.transfer.distill import StoreTeacher

    store = TeacherStore(store_dir)
    first = TeacherJoin(store, policy="mask")
    first(np.array([-5, *rows["example_id"][:9]], dtype=np.int64))
    second = first.fresh()
    assert (second.requested, second.found) == (0, 0)  # its own counts
    assert (first.requested, first.found) == (10, 9)
    q = rows["example_id"][20:40]
    np.testing.assert_array_equal(second(q).logits, first(q).logits)
    assert second._logits is first._logits  # one read of the store for both
    teacher = StoreTeacher(store, ["click"] if "click" in store.tasks else store.tasks[:1],
                           policy="mask", join=first.fresh())
    assert teacher.join._logits is first._logits and teacher.join.requested == 0
    with pytest.raises(ValueError, match="built for another store, days"):
        StoreTeacher(store, store.tasks, policy="error", join=first.fresh())


def test_join_error_policy(store_dir, rows):
    join = TeacherJoin(TeacherStore(store_dir), days=(3, 6))
    assert join(rows["example_id"][:10]).found.all()
    query = np.concatenate([rows["example_id"][10:20], [8]])
    with pytest.raises(StoreError, match=r"days \[3, 6\)\): example_id 8 has no teacher row "
                                         r"\(1 of 11 .* coverage so far 95\.2381% of 21 rows"):
        join(query)


def test_join_day_range_and_batch(store_dir, rows):
    store = TeacherStore(store_dir, verify_sha=False)
    join = TeacherJoin(store, days=(5, 6), policy="mask")
    assert len(join) == int((rows["day"] == 5).sum())
    n = 20
    batch = Batch(dense=torch.zeros(n, 0), categorical=torch.zeros(n, 0, dtype=torch.int64),
                  seq_values={}, seq_offsets=torch.zeros(n + 1, dtype=torch.int64),
                  seq_max_len=0, labels=torch.zeros(n, 3), domain=torch.zeros(n, dtype=torch.int64),
                  example_id=torch.from_numpy(rows["example_id"][:n]),
                  user_id=torch.zeros(n, dtype=torch.int64), day=torch.zeros(n, dtype=torch.int64),
                  ts=torch.zeros(n, dtype=torch.int64))
    res = join(batch)
    np.testing.assert_array_equal(res.found, rows["day"][:n] == 5)
    np.testing.assert_array_equal(res.logits[res.found], rows["logits"][:n][res.found])
    assert res.emb is None


def test_join_int8_embeddings(tmp_path, rows):
    write_store(tmp_path / "s", rows, emb_dtype="int8")
    store = TeacherStore(tmp_path / "s")
    res = TeacherJoin(store, with_emb=True)(rows["example_id"][::-1])
    table = store.read()
    expect = dict(zip(table.column("example_id").to_pylist(), store.embeddings(table),
                      strict=True))
    np.testing.assert_array_equal(res.emb, np.stack([expect[i] for i in rows["example_id"][::-1]]))


# ---- refusals --------------------------------------------------------------------------------
def _shard(store_dir: Path, k: int = 1) -> Path:
    return store_dir / f"part-r000-{k:05d}.parquet"


def _rows_mismatch(d):
    m = json.loads((d / "manifest.json").read_text())
    m["shards"][1]["rows"] += 1
    m["total_rows"] += 1
    (d / "manifest.json").write_text(json.dumps(m))


def _flip_byte(d):
    data = bytearray(_shard(d).read_bytes())
    data[len(data) // 2] ^= 0xFF
    _shard(d).write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt, message", [
    (_rows_mismatch, r"part-r000-00001\.parquet: has 40 rows, manifest\.json says 41"),
    (_flip_byte, r"part-r000-00001\.parquet: sha256 differs from manifest\.json"),
    (lambda d: _shard(d).unlink(), r"part-r000-00001\.parquet: listed in manifest\.json but "
                                   r"missing"),
    (lambda d: shutil.copy(_shard(d), d / "part-r001-00000.parquet"),
     r"shard part-r001-00000\.parquet is not listed in manifest\.json"),
    (lambda d: (d / "manifest.json").unlink(), r"no manifest\.json — the export did not finish"),
], ids=["rows", "sha", "deleted", "stray", "no-manifest"])
def test_store_refuses(store_dir, corrupt, message):
    corrupt(store_dir)
    with pytest.raises(StoreError, match=message):
        TeacherStore(store_dir)


def test_sha_check_can_be_skipped(store_dir):
    _flip_byte(store_dir)
    TeacherStore(store_dir, verify_sha=False)  # opens; row counts and schema still checked


def test_tasks_mismatch(store_dir):
    store = TeacherStore(store_dir)
    store.check_tasks(TASKS)
    with pytest.raises(StoreError, match=re.escape(
            "store has tasks ['click', 'conversion', 'organic'], student expects "
            "['click', 'conversion']")):
        store.check_tasks(["click", "conversion"])


def test_nan_logit_refused_on_load(tmp_path, rows):
    o = int(np.argsort(rows["example_id"])[0])
    rows["logits"][100, 1] = np.nan
    rows["emb"][o, 3] = np.inf
    write_store(tmp_path / "s", rows, check_finite=False)
    store = TeacherStore(tmp_path / "s")  # the files are intact; values are checked on load
    with pytest.raises(StoreError, match=r"part-r000-00002\.parquet: column 'logit_conversion' "
                                         r"row 20 is not finite"):
        store.read(columns=["example_id", "logit_conversion"])
    store.read(columns=["example_id", "logit_click"])  # other columns are fine
    with pytest.raises(StoreError, match=rf"part-r000-{o // 40:05d}\.parquet: column 'emb' row "
                                         rf"{o % 40} is not finite"):
        store.read(columns=["emb"])
    with pytest.raises(StoreError, match="is not finite"):
        TeacherJoin(store)


def test_writer_refuses_non_finite_and_bad_shapes(tmp_path, rows):
    w = StoreWriter(tmp_path / "s", **writer_args())
    bad = {k: v[:10].copy() for k, v in rows.items()}
    bad["logits"][4, 2] = np.inf
    with pytest.raises(StoreError, match=rf"rank 0 batch 0: logits\[4, 2\] is inf \(example_id "
                                         rf"{rows['example_id'][4]}\)"):
        w.write(**bad)
    big = {k: v[:10].copy() for k, v in rows.items()}
    big["emb"][7, 1] = 1e5
    with pytest.raises(StoreError, match=r"emb\[7, 1\] is 100000.0 .* beyond float16's range "
                                         r"±65504; export this layer as int8"):
        w.write(**big)
    with pytest.raises(StoreError, match=r"logits must be float \[10, 3\]"):
        w.write(**{**{k: v[:10] for k, v in rows.items()}, "logits": rows["logits"][:10, :2]})
    with pytest.raises(StoreError, match=r"day values 3000000000..3000000000 do not fit int32"):
        w.write(**{**{k: v[:1] for k, v in rows.items()}, "day": np.array([3_000_000_000])})
    w.abort()
    no_leftovers(tmp_path / "s")


def test_target_exists_refused(store_dir, rows):
    with pytest.raises(Exception, match="already exists"):
        StoreWriter(store_dir, **writer_args())
    m = write_store(store_dir, make_rows(20, seed=5), overwrite=True)
    assert TeacherStore(store_dir).num_rows == 20 == m.total_rows


# ---- duplicates, ranks, crashes --------------------------------------------------------------
def test_duplicates_removed_by_example_id(tmp_path, rows):
    """Rank 1 repeats rank 0's first rows (as a padding sampler does), at other batch indices."""
    target = tmp_path / "s"
    w0 = StoreWriter(target, rank=0, world_size=2, **writer_args())
    w1 = StoreWriter(target, rank=1, world_size=2, staging_dir=w0.staging_dir, **writer_args())
    r0 = {k: v[:100] for k, v in rows.items()}
    r1 = {k: np.concatenate([v[100:], v[:3]]) for k, v in rows.items()}
    r1["logits"][-3:] += 1.0  # the kept copy must be the first one (rank 0)
    feed(w0, r0)
    feed(w1, r1, batch=7)
    w1.write(**{k: v[:2] for k, v in r1.items()})  # a duplicate within rank 1 as well
    w1.close()
    m = w0.finalize()
    assert m.extra["duplicates_removed"] == 5 and m.total_rows == 150
    assert {s.file[:9] for s in m.shards} == {"part-r000", "part-r001"}
    store = TeacherStore(target)
    ids, logits, _ = sorted_by_id(store, store.read())
    o = np.argsort(rows["example_id"])
    np.testing.assert_array_equal(ids, rows["example_id"][o])
    np.testing.assert_array_equal(logits, rows["logits"][o])
    assert [p for p in target.iterdir() if p.name.startswith(("_", "."))] == []


def test_finalize_refuses_unfinished_rank(tmp_path, rows):
    target = tmp_path / "s"
    w0 = StoreWriter(target, rank=0, world_size=2, **writer_args())
    w1 = StoreWriter(target, rank=1, world_size=2, staging_dir=w0.staging_dir, **writer_args())
    feed(w0, rows)
    feed(w1, make_rows(50, first_id=1))
    with pytest.raises(StoreError, match=r"rank 1 did not finish \(no _rank-r001\.json\)"):
        w0.finalize()
    no_leftovers(target)


def test_export_that_died_before_finalize(tmp_path, rows):
    w = StoreWriter(tmp_path / "s", **writer_args())
    feed(w, rows)
    w.close()  # every shard is complete, but the process "dies" before finalize
    assert list(w.staging_dir.glob("part-*.parquet"))
    with pytest.raises(StoreError, match=r"no manifest\.json — the export did not finish"):
        TeacherStore(w.staging_dir)
    assert not (tmp_path / "s").exists()
    w.abort()
    no_leftovers(tmp_path / "s")


def test_crash_mid_export_leaves_no_store(tmp_path, rows):
    target = tmp_path / "s"
    with (pytest.raises(RuntimeError, match="teacher died"),
          StoreWriter(target, **writer_args()) as w):
        feed(w, rows)  # several shards are complete in the staging directory
        assert len(list(w.staging_dir.glob("part-*.parquet"))) == 3
        raise RuntimeError("teacher died")
    no_leftovers(target)
    with StoreWriter(target, **writer_args()) as w:
        feed(w, rows)
    assert TeacherStore(target).num_rows == 150

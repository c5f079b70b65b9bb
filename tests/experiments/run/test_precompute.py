"""The pair step on the tiny world: the vectors are the teacher's layer on the pair's row, the
store covers exactly the policy's picks, the measurements match a recount, and the method feeds
a hit its vector and a miss its fallback."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gemkd.adapters.methods.solaris import Solaris
from gemkd.experiments.run.solaris_precompute import MEASUREMENTS, k_grid, precompute_pairs
from gemkd.experiments.teacher.teacher_config import load_teacher
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import MethodContext
from gemkd.transfer.solaris import (
    PairStore,
    PastLog,
    build_policy,
    hit_rate_curve,
    read_log,
)

DAYS = [3, 4]
K = 3


@pytest.fixture(scope="module")
def pairs(tiny_data, tiny_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("pairs") / "pairs"
    res = precompute_pairs(tiny_data, DAYS, {d: tiny_ckpt for d in DAYS}, build_policy("recent"),
                           K, "trunk", out, item="ad_id", log=lambda _: None)
    return out, res


def test_k_grid():
    assert k_grid(1) == [1] and k_grid(8) == [1, 2, 4, 8] and k_grid(6) == [1, 2, 4, 6]


def test_store_covers_the_picks_and_measurements_recount(tiny_data, pairs):
    out, res = pairs
    store = PairStore(out)
    day, user, item, vec = store.read()
    keys = read_log(tiny_data, range(0, 5), "ad_id")
    policy = build_policy("recent")
    for d in DAYS:
        picks = policy.pick(PastLog.before(keys, d), K)
        got = set(zip(user[day == d].tolist(), item[day == d].tolist(), strict=True))
        assert got == set(zip(picks.user_id, picks.item, strict=True))
    assert store.dim == vec.shape[1] == 16 and np.isfinite(vec).all()  # tiny GEM's trunk
    on_disk = json.loads((out.parent / MEASUREMENTS).read_text())
    assert on_disk == json.loads(json.dumps(res))
    curve = hit_rate_curve(keys, policy, DAYS, k_grid(K))
    for rec, want in zip(res["days"], curve.to_dict("records"), strict=True):
        assert {k: rec[k] for k in want} == pytest.approx(want)
    # and by hand for day 3, K: served rows whose (user, ad) was picked
    d3 = keys[keys.day == 3]
    picked = set(zip(user[day == 3].tolist(), item[day == 3].tolist(), strict=True))
    hits = sum((u, i) in picked for u, i in zip(d3.user_id, d3.item, strict=True))
    top = [r for r in res["days"] if r["day"] == 3 and r["k"] == K][0]
    assert (top["hits"], top["served"]) == (hits, len(d3)) and hits > 0


def test_vector_is_the_teacher_layer_on_the_pair_row(tiny_data, tiny_ckpt, pairs):
    """Recompute one pair by hand: user u's last row before day 3, the ad's side from the ad's
    last row before day 3, the teacher's trunk on it."""
    out, _ = pairs
    day, user, item, vec = PairStore(out).read()
    j = int(np.flatnonzero(day == 3)[0])
    u, ad = int(user[j]), int(item[j])
    hist = pa.concat_tables([pq.read_table(tiny_data / f"day={d}" / "part-0.parquet")
                             for d in range(3)]).to_pandas()
    urow = hist[hist.user_id == u].sort_values("ts", kind="stable").iloc[[-1]].copy()
    arow = hist[hist.ad_id == ad].sort_values("ts", kind="stable").iloc[-1]
    for c in ("ad_id", "advertiser_id", "ad_category", "ad_format", "bid",
              *(f"creative_{i}" for i in range(8))):
        urow[c] = arow[c]
    urow["day"] = 3
    schema = DatasetSchema.load(tiny_data)
    tmp = out.parent / "byhand"
    (tmp / "day=3").mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(urow, preserve_index=False).cast(schema.arrow_schema()),
                   tmp / "day=3" / "part-0.parquet")
    dataclasses.replace(schema, days=[3], rows_per_day={"3": 1}).save(tmp)
    teacher = load_teacher(tiny_ckpt, tiny_data)
    batch = next(iter(DatasetReader(tmp, days=(3, 4), max_seq_len=teacher.cfg.max_seq_len)))
    with torch.no_grad():
        want = teacher.model.eval()(batch).repr["trunk"][0].numpy()
    np.testing.assert_allclose(vec[j], want, rtol=1e-5, atol=1e-6)


def _batch(day, user, ad, n_cat):
    b = len(day)
    cat = torch.zeros((b, n_cat), dtype=torch.int64)
    cat[:, 1] = torch.tensor(ad)  # ad_id is the tiny world's second categorical feature
    z = torch.zeros(b, dtype=torch.int64)
    return Batch(dense=torch.zeros((b, 0)), categorical=cat, seq_values={},
                 seq_offsets=torch.zeros(b + 1, dtype=torch.int64), seq_max_len=0,
                 labels=torch.zeros((b, 1)), domain=z, example_id=z,
                 user_id=torch.tensor(user), day=torch.tensor(day), ts=z)


@pytest.mark.parametrize("fallback", ["user_mean", "zero"])
def test_method_hit_and_miss(tiny_data, pairs, fallback):
    out, _ = pairs
    store = PairStore(out)
    day, user, item, vec = store.read()
    schema = DatasetSchema.load(tiny_data)
    m = Solaris(fallback=fallback)
    ctx = MethodContext(schema=schema, tasks=["click"], domains=schema.domains, lr=0.01,
                        pairs=store)
    assert m.feature_dim(ctx) == store.dim + 1
    m.setup(ctx)
    u = int(user[0])
    never = int(item.max()) + 1000  # an ad nobody precomputed
    f = m.features(_batch([int(day[0]), int(day[0])], [u, u], [int(item[0]), never],
                          len(schema.categorical))).numpy()
    np.testing.assert_array_equal(f[0], [*vec[0], 0.0])
    mine = vec[(day == day[0]) & (user == u)]
    expect = mine.mean(axis=0) if fallback == "user_mean" else np.zeros(store.dim)
    np.testing.assert_allclose(f[1], [*expect, 1.0], rtol=1e-6)


def test_method_without_pairs_is_a_config_error(tiny_data):
    schema = DatasetSchema.load(tiny_data)
    ctx = MethodContext(schema=schema, tasks=["click"], domains=schema.domains, lr=0.01)
    with pytest.raises(ConfigError, match="pair store"):
        Solaris().feature_dim(ctx)
    with pytest.raises(ValueError, match="fallback"):
        Solaris(fallback="nearest")

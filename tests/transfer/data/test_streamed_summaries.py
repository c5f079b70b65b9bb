"""``summary`` and ``validate``'s id check, streamed a day / row group at a time, give what the
whole-dataset versions gave (their former code is kept here as the reference)."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gemkd.transfer.data import validate
from gemkd.transfer.data.audit import check_unique_ids
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.dataset_summary import _quantile_of_counts, impressions_per_user, summarize
from gemkd.transfer.data.dataset_writer import day_path
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import DataError
from gemkd.transfer.metrics.numerics import normalized_entropy


def _old_summarize(root) -> pd.DataFrame:
    schema = DatasetSchema.load(root)
    seq = schema.sequence[0].name if schema.sequence else None
    cols = ["domain", *schema.tasks, *schema.oracle.values()] + ([seq] if seq else [])
    frames = []
    for day in schema.days:
        table = validate.open_parquet(day_path(root, day)).read(columns=cols)
        frame = pd.DataFrame({c: table.column(c).to_numpy() for c in cols if c != seq})
        if seq:
            frame["history"] = pc.list_value_length(table.column(seq)).to_numpy()
        frame["day"] = day
        frames.append(frame)
    data = pd.concat(frames, ignore_index=True)
    base = {t: float(data[t].mean()) for t in schema.tasks}
    rows = []
    for day, part in [*data.groupby("day"), ("all", data)]:
        row: dict = {"day": day, "examples": len(part)}
        for t in schema.tasks:
            row[f"{t}_rate"] = part[t].mean()
        for t, p in schema.oracle.items():
            row[f"oracle_ne_{t}"] = normalized_entropy(part[t].to_numpy(), part[p].to_numpy(),
                                                        base[t])
        if seq:
            row["hist_mean"] = part["history"].mean()
            row["hist_p50"] = part["history"].median()
            row["hist_p99"] = part["history"].quantile(0.99)
            row["hist_max"] = part["history"].max()
        shares = np.bincount(part["domain"], minlength=len(schema.domains)) / len(part)
        for name, share in zip(schema.domains, shares, strict=True):
            row[f"share_{name}"] = share
        rows.append(row)
    return pd.DataFrame(rows)


def _old_check(reader) -> str | None:
    ids, files, rows = [], [], []
    paths = list(dict.fromkeys(u.path for u in reader.units))
    for i, path in enumerate(paths):
        col = pq.read_table(path, columns=["example_id"]).column(0).to_numpy()
        ids.append(col)
        files.append(np.full(len(col), i))
        rows.append(np.arange(len(col)))
    all_ids = np.concatenate(ids)
    dup = pd.Index(all_ids).duplicated(keep="first")
    if not dup.any():
        return None
    second = int(np.argmax(dup))
    first = int(np.argmax(all_ids == all_ids[second]))
    f, r = np.concatenate(files), np.concatenate(rows)
    return (f"{paths[f[second]]}: column 'example_id' row {r[second]}: example_id "
            f"{all_ids[second]} is repeated (first at {paths[f[first]]} row {r[first]}); ids "
            f"must be unique")


def test_summary_equals_whole_dataset_summary(tiny_data):
    got, want = summarize(tiny_data), _old_summarize(tiny_data)
    assert list(got.columns) == list(want.columns) and len(got) == len(want)
    ne = [c for c in want.columns if c.startswith("oracle_ne_")]
    assert ne
    exact = want.drop(columns=ne)
    pd.testing.assert_frame_equal(got.drop(columns=ne), exact, check_exact=True,
                                  check_dtype=False)
    pd.testing.assert_frame_equal(got[ne].iloc[:-1], want[ne].iloc[:-1], check_exact=True)
    # ``all``: the days' losses are summed, not every row's pairwise
    np.testing.assert_allclose(got[ne].iloc[-1], want[ne].iloc[-1], rtol=1e-12)


def test_impressions_per_user_counts_the_users_of_each_window(tiny_data):
    """Each window's figures are over the users with a row in it (a user first seen later is
    not a zero of the first days': a new user's trial read a mean of 6.1 for 6.5)."""
    got = impressions_per_user(tiny_data, first_days=3)
    schema = DatasetSchema.load(tiny_data)
    user = np.concatenate([pq.read_table(day_path(tiny_data, d), columns=["user_id"])
                           .column(0).to_numpy() for d in schema.days])
    day = np.concatenate([np.full(pq.read_metadata(day_path(tiny_data, d)).num_rows, d)
                          for d in schema.days])
    ids, idx = np.unique(user, return_inverse=True)
    for row, m in zip(got.itertuples(), [day >= 0, day <= schema.days[2]], strict=True):
        counts = np.bincount(idx[m], minlength=len(ids))
        counts = counts[counts > 0]
        assert row.users == len(counts) and row.mean == counts.mean()
        assert (row.p10, row.p50, row.p90) == (np.percentile(counts, 10), np.median(counts),
                                               np.percentile(counts, 90))


@pytest.mark.parametrize("seed", range(6))
def test_quantile_of_counts_is_pandas_quantile(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50 + 400 * seed, int(rng.integers(1, 3000))).astype(np.int32)
    values, counts = np.unique(x, return_counts=True)
    for q in (0.5, 0.99, 0.1, 0.37):
        assert _quantile_of_counts(values, counts, q) == pd.Series(x).quantile(q)


def _rewrite(root, day: int, fn) -> None:
    path = day_path(root, day)
    table = pq.read_table(path)
    ids = fn(table.column("example_id").to_numpy().copy())
    table = table.set_column(table.schema.get_field_index("example_id"), "example_id",
                             pa.array(ids, pa.int64()))
    pq.write_table(table, path, row_group_size=37)  # several row groups per day


@pytest.fixture
def data(tiny_data, tmp_path):
    shutil.copytree(tiny_data, tmp_path / "d")
    return tmp_path / "d"


def test_unique_ids_pass_and_overlap(data):
    schema = DatasetSchema.load(data)
    d0, d1 = schema.days[:2]
    check_unique_ids(DatasetReader(data))
    first = pq.read_table(day_path(data, d0), columns=["example_id"]).column(0).to_numpy()
    second = pq.read_table(day_path(data, d1), columns=["example_id"]).column(0).to_numpy()
    a, b = int(first[3]), int(second[5])
    _rewrite(data, d0, lambda ids: np.where(ids == a, b, ids))  # swap: ranges overlap, no repeat
    _rewrite(data, d1, lambda ids: np.where(ids == b, a, ids)[::-1])
    reader = DatasetReader(data)
    assert len(reader.units) > 4 and _old_check(reader) is None
    check_unique_ids(reader)


@pytest.mark.parametrize("where", ["other day", "same row group", "same day"])
def test_repeated_id_named_as_before(data, where):
    schema = DatasetSchema.load(data)
    d0, d1 = schema.days[:2]
    first = pq.read_table(day_path(data, d0), columns=["example_id"]).column(0).to_numpy()
    if where == "other day":
        _rewrite(data, d1, lambda ids: np.where(np.arange(len(ids)) == 7, first[2], ids))
        _rewrite(data, d0, lambda ids: ids)
    elif where == "same row group":
        _rewrite(data, d0, lambda ids: np.where(np.arange(len(ids)) == 9, ids[4], ids))
    else:
        _rewrite(data, d0, lambda ids: np.where(np.arange(len(ids)) == 50, ids[1], ids))
    reader = DatasetReader(data)
    want = _old_check(reader)
    assert want is not None
    with pytest.raises(DataError) as e:
        check_unique_ids(reader)
    assert str(e.value) == want

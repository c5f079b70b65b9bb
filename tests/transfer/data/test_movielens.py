"""MovieLens conversion: labels, domains, and histories that never see the future."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema


@pytest.fixture(scope="module")
def ml(movielens_src, tmp_path_factory):
    out = tmp_path_factory.mktemp("ml") / "data"
    assert main(["data", "movielens", "--src", str(movielens_src), "--out", str(out),
                 "--n-days", "10", "--max-history", "200"]) == 0
    files = sorted(str(p) for p in out.glob("day=*/*.parquet"))
    return out, ds.dataset(files, format="parquet").to_table()


def test_rows_labels_and_ids(ml, movielens_src):
    out, t = ml
    ratings = pd.read_parquet(movielens_src / "ratings.parquet")
    assert t.num_rows == len(ratings)
    schema = DatasetSchema.load(out)
    assert schema.tasks == ["click", "conversion"] and schema.days == list(range(10))
    assert schema.domains == ["action", "drama", "light", "other"]
    merged = pd.DataFrame({"u": t["user_id"].to_numpy(), "m": t["item_id"].to_numpy(),
                           "click": t["click"].to_numpy(),
                           "conv": t["conversion"].to_numpy()}).merge(
        ratings, left_on=["u", "m"], right_on=["userId", "movieId"], validate="one_to_one")
    assert len(merged) == len(ratings)  # source ids kept
    assert {c: e["rule"] for c, e in schema.vocabularies.items()} == {
        "user_id": "raw", "item_id": "raw", "hist_item_id": "raw"}  # no tables: ids are codes
    assert np.array_equal(merged["click"], (merged["rating"] >= 4).astype(np.int8))
    assert np.array_equal(merged["conv"], (merged["rating"] == 5).astype(np.int8))
    assert np.all(np.diff(t["ts"].to_numpy()) >= 0)
    days = t["day"].to_numpy()
    assert np.all(np.diff(days) >= 0) and np.bincount(days).min() > 0.09 * len(days)


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_no_history_leaks_the_future(ml, movielens_src):
    _, t = ml
    ratings = pd.read_parquet(movielens_src / "ratings.parquet")
    lengths = pc.list_value_length(t["hist_item_id"]).to_numpy()
    users = np.repeat(t["user_id"].to_numpy(), lengths)
    ts = np.repeat(t["ts"].to_numpy(), lengths)
    items = pc.list_flatten(t["hist_item_id"]).to_numpy()
    hist = pd.DataFrame({"userId": users, "movieId": items, "row": np.arange(len(items))})
    hist = hist.merge(ratings, on=["userId", "movieId"], how="left").sort_values("row")
    hist_ts = hist["timestamp"].to_numpy()
    assert len(items) > 1_000_000
    assert np.all(hist_ts < ts)  # strictly before, ties excluded
    # and nothing earlier is missing: the length is the count of earlier ratings, capped
    r = ratings.sort_values(["userId", "timestamp"])
    earlier = r.groupby("userId")["timestamp"].rank(method="min").to_numpy() - 1
    expect = pd.Series(np.minimum(earlier, 200), index=pd.MultiIndex.from_frame(
        r[["userId", "movieId"]]))
    got = pd.Series(lengths, index=pd.MultiIndex.from_arrays(
        [t["user_id"].to_numpy(), t["item_id"].to_numpy()]))
    assert np.array_equal(got.sort_index().to_numpy(), expect.sort_index().to_numpy())


def test_reader_runs_on_movielens(ml):
    out, t = ml
    batches = list(DatasetReader(out, batch_size=4096))
    assert sum(len(b) for b in batches) == t.num_rows
    assert batches[0].oracle is None and batches[0].labels.shape[1] == 2


def test_ratings_only_directory(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ratings.csv").write_text(
        "userId,movieId,rating,timestamp\n1,10,4.0,100\n1,11,5.0,100\n1,12,2.0,200\n"
        "2,10,3.5,150\n2,13,5.0,300\n")
    out = tmp_path / "out"
    assert main(["data", "movielens", "--src", str(src), "--out", str(out), "--n-days",
                 "2"]) == 0
    schema = DatasetSchema.load(out)
    assert schema.domains == ["all"]
    batches = list(DatasetReader(out, batch_size=10))
    # time order: (u1,m10,t100) (u1,m11,t100) (u2,m10,t150) (u1,m12,t200) (u2,m13,t300)
    assert [x for b in batches for x in b.seq_lengths.tolist()] == [0, 0, 0, 2, 1]
    items = [x for b in batches for x in b.seq_values["hist_item_id"].tolist()]
    assert items == [10, 11, 10]  # the tie at t=100 is not in anyone's history


def test_bad_ratings_file(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,10,4.0,100\n"
                                     "1,x,5.0,100\n")
    out = tmp_path / "out"
    assert main(["data", "movielens", "--src", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ratings.csv: column 'movieId' line 3: 'x' is not an integer" in err
    (src / "ratings.csv").write_text("user,movieId,rating,timestamp\n1,10,4.0,100\n")
    assert main(["data", "movielens", "--src", str(src), "--out", str(out)]) == 2
    assert "column 'userId' missing" in capsys.readouterr().err
    (src / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,10,7.0,100\n")
    assert main(["data", "movielens", "--src", str(src), "--out", str(out)]) == 2
    assert "outside [0.5, 5]" in capsys.readouterr().err
    assert not out.exists()

"""The real logs shipped in datasets/: the published data itself, read by the loaders from a
clone, and the CSV layout they came in still read the same way."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gemkd.experiments.run import data_sources
from gemkd.experiments.run.data_sources import data_plan
from gemkd.experiments.run.preflight import check_spec
from gemkd.experiments.spec.load import load_spec
from gemkd.transfer.data.importer import load_mapping, source
from gemkd.transfer.data.kuairand import convert_kuairand
from gemkd.transfer.data.movielens import _read_movies, _read_ratings, convert_movielens
from gemkd.transfer.errors import ConfigError, DataError
from tests.conftest import KUAIRAND, KUAIRAND_MAPPING, MOVIELENS, ROOT, dataset_table

KUAIRAND_LOG = KUAIRAND / "log_standard_4_25_to_5_08_pure.parquet"


def recorded(folder: Path) -> dict[str, tuple[int, str]]:
    """PROVENANCE.md's table rows: file stem → (rows, sha256 of the original CSV)."""
    text = (folder / "PROVENANCE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `?([\w.]+?)(?:\.csv)?`? \| ([\d,]+) \|.*\| ([0-9a-f]{64}) \|$", text,
                      re.M)
    return {name: (int(n.replace(",", "")), digest) for name, n, digest in rows}


SHIPPED = [(folder, name) for folder in (KUAIRAND, MOVIELENS) for name in recorded(folder)]


@pytest.mark.parametrize("folder, name", [
    pytest.param(f, n, marks=[pytest.mark.slow] if n.startswith("log_") else [])
    for f, n in SHIPPED], ids=[n for _, n in SHIPPED])
def test_parquet_writes_back_the_published_csv(folder: Path, name: str):
    """Each Parquet file is its CSV, byte for byte (the sha256 PROVENANCE.md records)."""
    rows, digest = recorded(folder)[name]
    frame = pd.read_parquet(folder / f"{name}.parquet")
    assert len(frame) == rows
    text = frame.to_csv(index=False, lineterminator="\n").encode()
    assert hashlib.sha256(text).hexdigest() == digest


def test_every_shipped_file_is_recorded():
    assert len(recorded(KUAIRAND)) == 3 and len(recorded(MOVIELENS)) == 4
    for folder in (KUAIRAND, MOVIELENS):
        assert sorted(p.stem for p in folder.glob("*.parquet")) == sorted(recorded(folder))
    assert (KUAIRAND / "LICENSE").is_file() and (MOVIELENS / "README.txt").is_file()


def test_loaders_read_the_shipped_logs():
    """A small read through the loaders' own readers: sizes, days and label rates as
    PROVENANCE.md states them."""
    cols = ["date", "tab", "is_click", "long_view"]
    log = source.read(KUAIRAND_LOG, cols)
    assert source.header(KUAIRAND_LOG)[:5] == ["user_id", "video_id", "date", "hourmin",
                                               "time_ms"]
    assert log.shape == (228_329, 4) and log["date"].dtype == np.int64
    assert sorted(log["date"].unique()) == [*range(20220425, 20220431), *range(20220501, 20220509)]
    assert round(log["is_click"].mean(), 3) == 0.442 and round(log["long_view"].mean(), 3) == 0.311
    assert log["tab"].value_counts().head(2).to_dict() == {1: 173_008, 0: 20_254}
    ratings = _read_ratings(MOVIELENS / "ratings.parquet")
    assert ratings.shape == (100_836, 4) and ratings["userId"].nunique() == 610
    assert set(np.unique(ratings["rating"] * 2)) == set(range(1, 11))  # half stars
    movies = _read_movies(MOVIELENS / "movies.parquet")
    assert len(movies) == 9_742 and set(movies["domain"]) == {0, 1, 2, 3}


def test_sources_default_to_the_shipped_logs():
    assert data_sources.DEFAULT_KUAIRAND == KUAIRAND
    assert data_sources.DEFAULT_MOVIELENS == MOVIELENS


@pytest.mark.parametrize("name, folder", [("kuairand", KUAIRAND), ("movielens", MOVIELENS)])
def test_real_data_specs_validate_from_a_clone(name: str, folder: Path):
    """The shipped specs pass every check before any work, reading the logs in datasets/."""
    spec = load_spec(ROOT / "experiments" / f"{name}.yaml")
    assert spec.data.src is None  # the default: the shipped folder
    check_spec(spec)
    assert data_plan(spec).key["src"] == str(folder.resolve())


def test_missing_default_says_to_pass_src(monkeypatch, tmp_path):
    """An installed gemkd has no datasets/: the spec must name data.src, and the error says so."""
    monkeypatch.setattr(data_sources, "DEFAULT_KUAIRAND", tmp_path / "absent")
    spec = load_spec(ROOT / "experiments" / "kuairand.yaml")
    with pytest.raises(ConfigError, match=r"data\.src: not given.*absent.*--set data\.src=DIR"):
        data_plan(spec)


def _kuairand_sample(n: int = 4000) -> dict[str, pd.DataFrame]:
    """The first ``n`` rows of the shipped log and the side-table rows they join."""
    log = pd.read_parquet(KUAIRAND_LOG).iloc[:n]
    users = pd.read_parquet(KUAIRAND / "user_features_pure.parquet")
    videos = pd.read_parquet(KUAIRAND / "video_features_basic_pure.parquet")
    return {"log_standard_s": log,
            "user_features_s": users[users["user_id"].isin(log["user_id"])],
            "video_features_basic_s": videos[videos["video_id"].isin(log["video_id"])]}


def _write(tables: dict[str, pd.DataFrame], folder: Path, suffix: str) -> Path:
    folder.mkdir()
    for name, frame in tables.items():
        if suffix == ".csv":
            frame.to_csv(folder / f"{name}.csv", index=False)
        else:
            frame.to_parquet(folder / f"{name}.parquet", index=False)
    return folder


def test_csv_and_parquet_layouts_give_the_same_datasets(tmp_path):
    """A user's CSV folder and the shipped Parquet layout convert to identical datasets."""
    mapping = load_mapping(KUAIRAND_MAPPING)
    tables = _kuairand_sample()
    out = {}
    for suffix in (".csv", ".parquet"):
        src = _write(tables, tmp_path / f"kr_{suffix[1:]}", suffix)
        convert_kuairand(src, tmp_path / f"kr_out_{suffix[1:]}", mapping)
        out[suffix] = dataset_table(tmp_path / f"kr_out_{suffix[1:]}")
    assert out[".csv"].num_rows == 4000 and "author_id" in out[".csv"].column_names
    assert out[".csv"].equals(out[".parquet"])
    ratings = pd.read_parquet(MOVIELENS / "ratings.parquet").iloc[::20]
    movies = pd.read_parquet(MOVIELENS / "movies.parquet")
    for suffix in (".csv", ".parquet"):
        src = _write({"ratings": ratings, "movies": movies}, tmp_path / f"ml_{suffix[1:]}", suffix)
        convert_movielens(src, tmp_path / f"ml_out_{suffix[1:]}", n_days=5)
        out[suffix] = dataset_table(tmp_path / f"ml_out_{suffix[1:]}")
    assert out[".csv"].num_rows == len(ratings) and "genre" in out[".csv"].column_names
    assert out[".csv"].equals(out[".parquet"])


def test_a_log_in_both_formats_is_refused(tmp_path):
    """Both copies would be read: every row twice."""
    log = _kuairand_sample(50)["log_standard_s"]
    src = _write({"log_standard_s": log}, tmp_path / "kr", ".csv")
    log.to_parquet(src / "log_standard_s.parquet", index=False)
    with pytest.raises(DataError, match="both log_standard_s.csv and log_standard_s.parquet"):
        convert_kuairand(src, tmp_path / "out", load_mapping(KUAIRAND_MAPPING))
    ml = _write({"ratings": pd.read_parquet(MOVIELENS / "ratings.parquet").iloc[:50]},
                tmp_path / "ml", ".csv")
    pq.write_table(pa.table({"userId": [1]}), ml / "ratings.parquet")
    with pytest.raises(DataError, match="both ratings.parquet and ratings.csv; keep one"):
        convert_movielens(ml, tmp_path / "out")
    assert not (tmp_path / "out").exists()

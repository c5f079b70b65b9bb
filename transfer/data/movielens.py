"""MovieLens ratings → the gemkd schema (DESIGN §2.4).

Every rating is one example: rating >= 4 is a click, rating 5 a conversion (so conversion implies
click). The history is the user's ratings strictly before the row's timestamp (ties excluded:
nothing from the same second can leak). Domains group movies by genre; days are time buckets with
equal example counts. Any ``ratings`` table with ``userId,movieId,rating,timestamp`` works, as CSV
(``ratings.csv``, GroupLens's layout) or Parquet (``ratings.parquet``, as shipped in
``datasets/movielens_latest_small``); without ``movies`` there is one domain and no genre features.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gemkd.transfer.data import vocabulary
from gemkd.transfer.data.dataset_writer import write_day
from gemkd.transfer.data.importer import source
from gemkd.transfer.data.ranges import (
    N_AGE_BUCKETS,
    age_buckets,
    equal_count_days,
    gather_ranges,
    history_ranges,
)
from gemkd.transfer.data.schema import SCHEMA_FILE, DatasetSchema, Feature
from gemkd.transfer.errors import DataError
from gemkd.transfer.io.publish import output_directory

RATING_COLUMNS = ["userId", "movieId", "rating", "timestamp"]
# Genre → domain; a movie goes to the group most of its genres fall in (ties: first group).
GENRE_GROUPS = {
    "action": ["Action", "Adventure", "Sci-Fi", "Thriller", "War", "Western", "Crime"],
    "drama": ["Drama", "Romance", "Mystery", "Film-Noir"],
    "light": ["Comedy", "Animation", "Children", "Fantasy", "Musical"],
    "other": ["Horror", "Documentary", "IMAX", "(no genres listed)"],
}
OTHER_DOMAIN = list(GENRE_GROUPS).index("other")
N_DECADES = 16  # 1870s .. 2020s, plus 0 for unknown


MOVIE_COLUMNS = ["movieId", "title", "genres"]
TABLE_SUFFIXES = (".parquet", ".csv", ".csv.gz")


def table_file(src: Path, name: str) -> Path | None:
    """``src``'s table ``name`` (``ratings`` or ``movies``) as Parquet or CSV; None if absent.
    Both formats at once is an error: which one is the data would be a guess."""
    found = [src / f"{name}{suffix}" for suffix in TABLE_SUFFIXES
             if (src / f"{name}{suffix}").is_file()]
    if len(found) > 1:
        raise DataError(f"{src}: both {found[0].name} and {found[1].name}; keep one")
    return found[0] if found else None


def _read_table(path: Path, columns: list[str]) -> pd.DataFrame:
    """The named columns of a CSV or Parquet file, each one there."""
    have = source.header(path)
    for col in columns:
        if col not in have:
            raise DataError(f"{path}: column {col!r} missing (header must be "
                            f"{','.join(columns)})")
    return source.read(path, columns)


def _read_ratings(path: Path) -> pd.DataFrame:
    df = _read_table(path, RATING_COLUMNS)
    if df.empty:
        raise DataError(f"{path}: no rows")
    for col in RATING_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna().to_numpy()
        if col != "rating":
            bad = bad | ~np.isclose(values.fillna(0).to_numpy() % 1, 0)
        if bad.any():
            row = int(np.argmax(bad))
            raise DataError(f"{path}: column {col!r} {source.place(path, row)}: "
                            f"{df[col].iloc[row]!r} is "
                            f"not a{'n integer' if col != 'rating' else ' number'}")
        df[col] = values
        if col != "rating" and (values < 0).any():
            row = int(np.argmax((values < 0).to_numpy()))
            raise DataError(f"{path}: column {col!r} {source.place(path, row)}: negative value "
                            f"{df[col].iloc[row]}")
    bad = ~df["rating"].between(0.5, 5.0).to_numpy()
    if bad.any():
        row = int(np.argmax(bad))
        raise DataError(f"{path}: column 'rating' {source.place(path, row)}: "
                        f"{df['rating'].iloc[row]} outside [0.5, 5]")
    return df.astype({"userId": np.int64, "movieId": np.int64, "timestamp": np.int64})


def _read_movies(path: Path) -> pd.DataFrame:
    movies = _read_table(path, MOVIE_COLUMNS)
    genres = movies["genres"].fillna("").astype(str).str.split("|")
    names = list(GENRE_GROUPS)
    group_of = {g: i for i, gs in enumerate(GENRE_GROUPS.values()) for g in gs}
    all_genres = sorted({g for gs in GENRE_GROUPS.values() for g in gs})
    genre_index = {g: i for i, g in enumerate(all_genres)}

    def domain(gs: list[str]) -> int:
        counts = np.bincount([group_of[g] for g in gs if g in group_of], minlength=len(names))
        return int(np.argmax(counts)) if counts.sum() else OTHER_DOMAIN

    def year(title: str) -> int:
        m = re.search(r"\((\d{4})\)\s*$", str(title))
        return int(m.group(1)) if m else 0

    years = movies["title"].map(year)
    return pd.DataFrame({
        "movieId": movies["movieId"].astype(np.int64),
        "domain": genres.map(domain).astype(np.int16),
        "genre": genres.map(lambda gs: genre_index.get(gs[0], 0)).astype(np.int64),
        "decade": np.where(years > 0, np.clip((years - 1870) // 10 + 1, 1, N_DECADES - 1), 0),
    })


def convert_movielens(src: str | Path, out: str | Path, n_days: int = 20,
                      max_history: int = 1024, overwrite: bool = False) -> DatasetSchema:
    """Write a MovieLens ratings folder as a gemkd dataset, atomically.

    Parameters
    ----------
    src
        The folder with ``ratings.csv`` or ``ratings.parquet`` (``movies.*`` optional: genres).
    out
        The dataset directory.
    n_days
        Equal-count time buckets that become the dataset's days.
    max_history
        The most recent events kept in each history.
    overwrite
        Replace a dataset already at ``out``.

    Returns
    -------
    DatasetSchema

    Raises
    ------
    DataError
        Naming the file and column of a bad input.
    """
    src = Path(src)
    if n_days < 1:
        raise DataError(f"n_days must be >= 1, got {n_days}")
    if not src.is_dir():
        raise DataError(f"{src}: not a directory (expected ratings.csv or ratings.parquet "
                        "inside)")
    ratings_path = table_file(src, "ratings")
    if ratings_path is None:
        raise DataError(f"{src}: no ratings.csv or ratings.parquet (expected a table with "
                        f"{','.join(RATING_COLUMNS)})")
    df = _read_ratings(ratings_path)
    movies_path = table_file(src, "movies")
    has_movies = movies_path is not None
    if movies_path is not None:
        movies = _read_movies(movies_path)
        df = df.merge(movies, on="movieId", how="left")
        df["domain"] = df["domain"].fillna(OTHER_DOMAIN).astype(np.int16)
        df[["genre", "decade"]] = df[["genre", "decade"]].fillna(0).astype(np.int64)
        domains = list(GENRE_GROUPS)
    else:
        df["domain"] = np.int16(0)
        domains = ["all"]

    # Histories need (user, time) order; examples are written in global time order.
    df = df.sort_values(["userId", "timestamp", "movieId"], kind="stable").reset_index(drop=True)
    start, end = history_ranges(df["userId"].to_numpy(), df["timestamp"].to_numpy(), max_history)
    order = np.lexsort((df["movieId"].to_numpy(), df["userId"].to_numpy(),
                        df["timestamp"].to_numpy()))
    ts = df["timestamp"].to_numpy()
    day = equal_count_days(ts, n_days)
    example_id = np.empty(len(df), dtype=np.int64)
    example_id[order] = np.arange(len(df))

    item = df["movieId"].to_numpy()
    rating2 = np.rint(df["rating"].to_numpy() * 2).astype(np.int32)
    categorical = [Feature("user_id", int(df["userId"].max()) + 1),
                   Feature("item_id", int(item.max()) + 1)]
    if has_movies:
        categorical += [Feature("genre", 32), Feature("decade", N_DECADES)]
    schema = DatasetSchema(
        source="movielens",
        categorical=categorical,
        dense=[],
        sequence=[Feature("hist_item_id", int(item.max()) + 1), Feature("hist_rating", 11),
                  Feature("hist_age", N_AGE_BUCKETS)],
        tasks=["click", "conversion"],
        domains=domains,
        days=sorted(int(d) for d in np.unique(day)),
        max_history=max_history,
        generator={"source": str(src), "n_days": n_days, "max_history": max_history},
    )
    arrow_schema = schema.arrow_schema()
    with output_directory(out, overwrite=overwrite, last=(SCHEMA_FILE,)) as tmp:
        for d in schema.days:
            rows = order[day[order] == d]  # this day's rows, in time order
            table = _day_table(df, rows, start, end, item, rating2, ts, example_id, day,
                               has_movies)
            write_day(table.cast(arrow_schema), tmp, d)
            schema.rows_per_day[str(d)] = table.num_rows
        schema.vocabularies = vocabulary.write_vocabularies(  # source ids are the codes
            {"user_id": vocabulary.rule_only("raw", f"{ratings_path.name} column 'userId'"),
             "item_id": vocabulary.rule_only("raw", f"{ratings_path.name} column 'movieId'")},
            tmp, {"hist_item_id": "item_id"})
        schema.save(tmp)
    return schema


def _day_table(df: pd.DataFrame, rows: np.ndarray, start: np.ndarray, end: np.ndarray,
               item: np.ndarray, rating2: np.ndarray, ts: np.ndarray, example_id: np.ndarray,
               day: np.ndarray, has_movies: bool) -> pa.Table:
    lengths = end[rows] - start[rows]
    offsets, idx = gather_ranges(start[rows], lengths)
    age = age_buckets(ts[rows], lengths, ts[idx])
    rating = df["rating"].to_numpy()[rows]
    o = pa.array(offsets.astype(np.int32))
    cols = {
        "example_id": example_id[rows],
        "ts": ts[rows],
        "day": day[rows],
        "domain": df["domain"].to_numpy()[rows],
        "user_id": df["userId"].to_numpy()[rows],
        "item_id": item[rows],
    }
    if has_movies:
        cols["genre"] = df["genre"].to_numpy()[rows]
        cols["decade"] = df["decade"].to_numpy()[rows]
    table = {k: pa.array(v) for k, v in cols.items()}
    table["hist_item_id"] = pa.ListArray.from_arrays(o, pa.array(item[idx]))
    table["hist_rating"] = pa.ListArray.from_arrays(o, pa.array(rating2[idx]))
    table["hist_age"] = pa.ListArray.from_arrays(o, pa.array(age))
    table["click"] = pa.array((rating >= 4).astype(np.int8))
    table["conversion"] = pa.array((rating >= 5).astype(np.int8))
    return pa.table(table)

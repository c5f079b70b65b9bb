"""How fast real base rates move from day to day: the figures behind ``calibration_drift``.

    python -m studies.base_rate_drift [--datasets datasets] [--min-rows 400] [--synthetic DIR]

For every (dataset, surface, label) it prints the daily positive rate's logit and two figures
of its movement over days: the std over days of the daily logit, and the mean |day-to-day
change| of the logit. Both are inflated by sampling noise (a day of n rows at rate p has a logit
noise variance of about 1 / (n p (1 - p))), so each comes raw and with that noise removed
(``*_true``: std over days sqrt(raw^2 - mean noise variance); the day-to-day change as a root
mean square sqrt(mean(d^2) - mean(noise_t + noise_t-1)), 0 when noise explains it all).

- KuaiRand-Pure (``datasets/kuairand_pure_slice``): one surface = one ``tab`` with at
  least ``--min-rows`` rows a day on average; one day = one ``date``; labels ``is_click``,
  ``long_view``, ``is_like``.
- MovieLens (``datasets/movielens_latest_small``): one surface = one genre group of
  ``gemkd.transfer.data.movielens`` (the ``domain`` its converter writes); one "day" = one of 20
  time buckets with equal rating counts, as ``gemkd data movielens`` cuts them; label rating >= 4.
- ``--synthetic DIR``: a gemkd dataset, per domain and day, labels ``click`` and ``engage``
  (to set the synthetic world's ``calibration_drift`` beside the real figures).

The core of it is this pandas snippet (``label`` a 0/1 column, ``surface`` and ``day`` keys)::

    g = df.groupby(["surface", "day"])[label].agg(["mean", "size"])
    g["logit"] = np.log(g["mean"] / (1 - g["mean"]))
    g["noise"] = 1 / (g["size"] * g["mean"] * (1 - g["mean"]))
    per = g.groupby(level="surface")
    std_raw = per["logit"].std(ddof=1)
    step_raw = per["logit"].apply(lambda s: s.diff().abs().mean())

Datasets that are absent are skipped with a note; the script exits 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def drift_table(df: pd.DataFrame, label: str, min_rows: float) -> pd.DataFrame:
    """One row per surface: days, rows/day, rate, std over days and day-to-day change of logit."""
    g = df.groupby(["surface", "day"])[label].agg(["mean", "size"]).reset_index()
    g = g[(g["mean"] > 0) & (g["mean"] < 1)]
    g["logit"] = np.log(g["mean"] / (1 - g["mean"]))
    g["noise"] = 1.0 / (g["size"] * g["mean"] * (1 - g["mean"]))
    rows = []
    for surface, s in g.sort_values(["surface", "day"]).groupby("surface"):
        if len(s) < 3 or s["size"].mean() < min_rows:
            continue
        logit, noise = s["logit"].to_numpy(), s["noise"].to_numpy()
        d = np.diff(logit)
        std_raw = float(np.std(logit, ddof=1))
        step_var = float(np.mean(d ** 2) - np.mean(noise[1:] + noise[:-1]))
        rows.append({
            "label": label, "surface": surface, "days": len(s),
            "rows_per_day": round(float(s["size"].mean())),
            "rate": float(np.average(s["mean"], weights=s["size"])),
            "logit_std_raw": std_raw,
            "logit_std_true": float(np.sqrt(max(std_raw ** 2 - noise.mean(), 0.0))),
            "step_abs_raw": float(np.abs(d).mean()),
            "step_rms_true": float(np.sqrt(max(step_var, 0.0))),
        })
    return pd.DataFrame(rows)


def kuairand(datasets: Path, min_rows: float) -> pd.DataFrame | None:
    from gemkd.transfer.data.importer import source

    src = datasets / "kuairand_pure_slice"
    logs = sorted(src.glob("log_standard*.parquet")) or sorted(src.glob("log_standard*.csv"))
    if len(logs) != 1:
        print(f"skip KuaiRand: {len(logs)} log_standard*.parquet / .csv files in {src}, not 1")
        return None
    df = source.read(logs[0], ["date", "tab", "is_click", "long_view", "is_like"])
    df = df.rename(columns={"tab": "surface", "date": "day"})
    out = pd.concat([drift_table(df, lab, min_rows) for lab in ["is_click", "long_view",
                                                                "is_like"]])
    out.insert(0, "dataset", "kuairand")
    return out


def movielens(datasets: Path, n_buckets: int = 20) -> pd.DataFrame | None:
    from gemkd.transfer.data.movielens import (
        GENRE_GROUPS,
        OTHER_DOMAIN,
        _read_movies,
        _read_ratings,
        table_file,
    )

    src = datasets / "movielens_latest_small"
    ratings, movies = (table_file(src, name) if src.is_dir() else None
                       for name in ("ratings", "movies"))
    if ratings is None or movies is None:
        print(f"skip MovieLens: no ratings and movies (.parquet or .csv) in {src}")
        return None
    df = _read_ratings(ratings)
    df = df.merge(_read_movies(movies)[["movieId", "domain"]], on="movieId", how="left")
    df["surface"] = df["domain"].fillna(OTHER_DOMAIN).astype(int).map(
        dict(enumerate(GENRE_GROUPS)))
    ts = df["timestamp"].to_numpy()
    edges = np.quantile(ts, np.linspace(0, 1, n_buckets + 1)[1:-1])
    df["day"] = np.searchsorted(edges, ts, side="right")
    df["rating_ge_4"] = (df["rating"] >= 4).astype(int)
    out = drift_table(df, "rating_ge_4", 0)
    out.insert(0, "dataset", "movielens")
    return out


def synthetic(root: Path) -> pd.DataFrame:

    from gemkd.transfer.data.dataset_writer import read_day
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(root)
    frames = []
    for day in schema.days:
        t = read_day(root, day, ["domain", "click", "engage"])
        f = t.to_pandas()
        f["day"] = day
        frames.append(f)
    df = pd.concat(frames, ignore_index=True)
    df["surface"] = df["domain"].map(dict(enumerate(schema.domains)))
    out = pd.concat([drift_table(df, lab, 0) for lab in ["click", "engage"]])
    out.insert(0, "dataset", f"synthetic:{root.name}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=str(ROOT / "datasets"),
                   help="the folder holding kuairand_pure_slice/ and movielens_latest_small/ "
                        "(default: the repository's datasets/)")
    p.add_argument("--min-rows", type=float, default=400,
                   help="KuaiRand surfaces with fewer rows a day are left out")
    p.add_argument("--synthetic", default=None, help="also a gemkd dataset directory")
    args = p.parse_args()
    datasets = Path(args.datasets)
    parts = [t for t in (kuairand(datasets, args.min_rows), movielens(datasets))
             if t is not None]
    if args.synthetic:
        parts.append(synthetic(Path(args.synthetic)))
    if not parts:
        return
    table = pd.concat(parts, ignore_index=True)
    with pd.option_context("display.width", 200, "display.max_columns", 20,
                           "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
        print("\nmedian per dataset and label:")
        cols = ["logit_std_raw", "logit_std_true", "step_abs_raw", "step_rms_true"]
        print(table.groupby(["dataset", "label"])[cols].median().to_string())


if __name__ == "__main__":
    main()

"""A generated thin review log: few rows a day over many years, most users with one event.

The shape of a small public ratings log (~90k ratings, ~72k users, ~2.4k items over 17 years,
~10 rows a day, the median user rating once): most of ~6,000 calendar days hold a handful of
rows, a few days none. Writes ``OUT/reviews.csv`` (time, user, item, rating) and
``OUT/mapping.yaml`` (calendar days in UTC, dense ids, a label ``rating >= 4``, histories of
item ids and ages), the mapping a user would first write for it.

Ratings carry signal, as a real log's do, so a run on it can show what a thin log allows: an
ordered logistic model, ``rating = 1 + #{k: s + e > c_k}`` with ``e`` standard logistic noise
and the latent ``s = q_item + POPULARITY * z(log rows of the item) + b_user``: an item's
quality ``q ~ N(0, ITEM_SD)``, a popularity effect (popular items are rated higher), and a
user's bias ``b ~ N(0, USER_SD)`` (a lenient or a harsh rater). The cut points ``c_k`` are the
latent's quantiles that give the ratings their shares (8, 9, 18, 30, 35 %: ~65 % rate 4 or
more). Items recur, so their effects are learnable; most users rate once, so their bias is not:
the signal a model can find is mostly the items'. Times, users and items are drawn as before
the ratings, so the log's shape (days, users, items) does not depend on the rating model.

    python -m benchmarks.thin_log --out /tmp/thin
    gemkd data import --src /tmp/thin/reviews.csv --mapping /tmp/thin/mapping.yaml --out /tmp/ds
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

T0 = 1_041_379_200  # 2003-01-01 00:00 UTC
DAY = 86_400
RATING_SHARES = (0.08, 0.09, 0.18, 0.30, 0.35)  # ratings 1..5
ITEM_SD = 1.0      # spread of the items' quality (logits)
USER_SD = 0.8      # spread of the users' bias (logits)
POPULARITY = 0.3   # logit per standard deviation of an item's log row count
MAPPING = {
    "source": "thin_reviews",
    "files": ["reviews*.csv"],
    "time": {"column": "time", "unit": "s"},
    "days": {"calendar": "UTC"},
    "user": "user",
    "item": "item",
    "labels": {"liked": {"column": "rating", "op": ">=", "value": 4}},
    "history": {"max_events": 50, "fields": {"item_id": "item", "age": "age"}},
}


def thin_frame(rows: int = 90_000, users: int = 72_000, items: int = 2_400, years: float = 17.0,
               seed: int = 0) -> pd.DataFrame:
    """The log's rows in time order: every user has one event, the rest go to a heavy-tailed
    few (so most users have one event); items by a Zipf law; times spread over ``years`` with
    a slow rise in volume (a site growing), so the early years are thinner still."""
    if users > rows:
        raise ValueError(f"users {users} > rows {rows}: every user has at least one row")
    rng = np.random.default_rng(seed)
    activity = rng.pareto(1.2, users)
    activity /= activity.sum()
    user = np.concatenate([np.arange(users), rng.choice(users, rows - users, p=activity)])
    span = int(years * 365.25 * DAY)
    t = T0 + np.sort((span * np.sqrt(rng.random(rows))).astype(np.int64))  # volume rises
    user = rng.permutation(user)
    item = np.minimum(rng.zipf(1.4, rows) - 1, items - 1)
    rating = ratings(rng, user, item, users, items)
    return pd.DataFrame({"time": t, "user": user + 100_000, "item": item + 1, "rating": rating})


def ratings(rng: np.random.Generator, user: np.ndarray, item: np.ndarray, users: int,
            items: int) -> np.ndarray:
    """Ratings 1..5 of the rows by the module's ordered logistic model (item quality and
    popularity, user bias; ``user`` and ``item``: 0-based ids)."""
    quality = rng.normal(0.0, ITEM_SD, items)
    bias = rng.normal(0.0, USER_SD, users)
    pop = np.log1p(np.bincount(item, minlength=items))
    pop = (pop - pop.mean()) / (pop.std() or 1.0)
    latent = quality[item] + POPULARITY * pop[item] + bias[user] + rng.logistic(size=len(item))
    cuts = np.quantile(latent, np.cumsum(RATING_SHARES)[:-1])
    return (1 + np.searchsorted(cuts, latent, side="right")).astype(np.int64)


def generate(out: Path, rows: int = 90_000, users: int = 72_000, items: int = 2_400,
             years: float = 17.0, seed: int = 0) -> Path:
    """Write the log and its mapping under ``out``; the log's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "reviews.csv"
    thin_frame(rows, users, items, years, seed).to_csv(path, index=False)
    (out / "mapping.yaml").write_text(yaml.safe_dump(MAPPING, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows", type=int, default=90_000)
    p.add_argument("--users", type=int, default=72_000)
    p.add_argument("--items", type=int, default=2_400)
    p.add_argument("--years", type=float, default=17.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    path = generate(a.out, a.rows, a.users, a.items, a.years, a.seed)
    print(f"wrote {a.rows} rows to {path}")


if __name__ == "__main__":
    main()

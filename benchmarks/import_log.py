"""A generated event log for measuring ``gemkd data import`` at scale.

Writes ``OUT/events.csv`` (8 columns: time, user, item, surface, device, click, buy, dwell),
``OUT/items.csv`` (an item side table: brand, price) and ``OUT/mapping.yaml`` (dense ids, 3
domains by share, two tasks, a log2-free categorical, a dense column, the side table, histories
of 100 events: item, click, age). Rows come day by day (``--rows-per-day``, so a longer log has
more days, as a longer export does), shuffled within each day; users and items are fixed in
number (``--users``, ``--items``), ids spread over millions as a real log's are. The generator
itself holds one day at a time. Labels are coin flips (10 % clicks, a fifth of them buys) unless
``--signal``: then a click's log-odds are a user bias + an item bias + a surface effect + the dot
product of 4-dim user and item factors, and a buy's depend on the first factor pair, so a
teacher has something to learn (the large-log recipe in docs/guides/scale.md uses it).

    python -m benchmarks.import_log --rows 1000000 --out /tmp/log_1m
    /usr/bin/time -v gemkd data import --src /tmp/log_1m --mapping /tmp/log_1m/mapping.yaml \\
        --out /tmp/ds_1m
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

T0 = 1_704_067_200  # 2024-01-01 00:00 UTC
DAY = 86_400
MAPPING = {
    "source": "generated_log",
    "files": ["events*.csv"],
    "time": {"column": "time", "unit": "s"},
    "days": {"calendar": "UTC"},
    "user": "user",
    "item": "item",
    "domain": {"column": "surface", "min_share": 0.05},
    "labels": {"click": "click", "buy": "buy"},
    "categorical": ["device"],
    "dense": [{"column": "dwell", "transform": "log1p"}],
    "history": {"max_events": 100,
                "fields": {"item_id": "item", "click": {"label": "click"}, "age": "age"}},
    "side_tables": [{"path": "items.csv", "key": "item", "categorical": ["brand"],
                     "dense": ["price"]}],
}


SURFACES = ["feed", "search", "related", "push"]


def _labels(rng: np.random.Generator, user: np.ndarray, item: np.ndarray,
            surface: np.ndarray, factors: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Click and buy labels drawn from a low-rank logit (``--signal``)."""
    u, v = factors["user"][user], factors["item"][item]
    logit = (-2.6 + factors["user_bias"][user] + factors["item_bias"][item]
             + factors["surface"][surface] + 0.6 * np.einsum("ij,ij->i", u, v))
    click = (rng.random(len(user)) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    buy_logit = -1.5 + 0.8 * u[:, 0] * v[:, 0]
    return click, click & (rng.random(len(user)) < 1 / (1 + np.exp(-buy_logit)))


def generate(rows: int, out: Path, rows_per_day: int = 125_000, users: int = 20_000,
             items: int = 50_000, seed: int = 0, signal: bool = False) -> None:
    """Write the log, its item table and its mapping under ``out``."""
    rng = np.random.default_rng(seed)
    factors = None
    if signal:
        f_rng = np.random.default_rng(seed + 1)  # the coin-flip log's draws stay as they were
        factors = {"user": f_rng.normal(0, 1, (users, 4)), "item": f_rng.normal(0, 1, (items, 4)),
                   "user_bias": f_rng.normal(0, 0.5, users),
                   "item_bias": f_rng.normal(0, 0.5, items),
                   "surface": np.array([0.0, 0.4, -0.3, -0.8])}
    out.mkdir(parents=True, exist_ok=True)
    user_ids = np.sort(rng.choice(5_000_000, users, replace=False)) + 1_000_000
    item_ids = np.sort(rng.choice(9_000_000, items, replace=False)) + 1_000_000
    activity = rng.pareto(1.5, users) + 1
    activity /= activity.sum()
    pd.DataFrame({"item": item_ids, "brand": rng.integers(0, 500, items),
                  "price": np.round(rng.lognormal(3, 1, items), 2)}
                 ).to_csv(out / "items.csv", index=False)
    path = out / "events.csv"
    day, written = 0, 0
    while written < rows:
        n = min(rows_per_day, rows - written)
        item = np.minimum(rng.zipf(1.3, n) - 1, items - 1)
        if factors is None:  # the draws in the order the coin-flip log always made them
            click = (rng.random(n) < 0.1).astype(np.int8)
        time = T0 + day * DAY + rng.integers(0, DAY, n)
        user = rng.choice(users, n, p=activity)
        surface = rng.choice(4, n, p=[0.6, 0.25, 0.12, 0.03])
        device = rng.choice(["ios", "android", "web"], n)
        if factors is None:
            buy = click & (rng.random(n) < 0.2)
        else:
            click, buy = _labels(rng, user, item, surface, factors)
        frame = pd.DataFrame({
            "time": time, "user": user_ids[user], "item": item_ids[item],
            "surface": np.asarray(SURFACES)[surface], "device": device,
            "click": click, "buy": buy, "dwell": np.round(rng.exponential(30, n), 1),
        })
        frame.to_csv(path, index=False, header=day == 0, mode="w" if day == 0 else "a")
        written += n
        day += 1
    (out / "mapping.yaml").write_text(yaml.safe_dump(MAPPING, sort_keys=False))
    print(f"wrote {written} rows over {day} days to {path}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows-per-day", type=int, default=125_000)
    p.add_argument("--users", type=int, default=20_000)
    p.add_argument("--items", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--signal", action="store_true",
                   help="labels from user/item factors instead of coin flips")
    a = p.parse_args(argv)
    generate(a.rows, a.out, a.rows_per_day, a.users, a.items, a.seed, a.signal)


if __name__ == "__main__":
    main()

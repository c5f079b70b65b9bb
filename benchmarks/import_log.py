"""A generated event log for measuring ``gemkd data import`` at scale.

Writes ``OUT/events.csv`` (8 columns: time, user, item, surface, device, click, buy, dwell),
``OUT/items.csv`` (an item side table: brand, price) and ``OUT/mapping.yaml`` (dense ids, 3
domains by share, two tasks, a log2-free categorical, a dense column, the side table, histories
of 100 events: item, click, age). Rows come day by day (``--rows-per-day``, so a longer log has
more days, as a longer export does), shuffled within each day; users and items are fixed in
number (``--users``, ``--items``), ids spread over millions as a real log's are. The generator
itself holds one day at a time.

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


def generate(rows: int, out: Path, rows_per_day: int = 125_000, users: int = 20_000,
             items: int = 50_000, seed: int = 0) -> None:
    """Write the log, its item table and its mapping under ``out``."""
    rng = np.random.default_rng(seed)
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
        item = item_ids[np.minimum(rng.zipf(1.3, n) - 1, items - 1)]
        click = (rng.random(n) < 0.1).astype(np.int8)
        frame = pd.DataFrame({
            "time": T0 + day * DAY + rng.integers(0, DAY, n),
            "user": user_ids[rng.choice(users, n, p=activity)],
            "item": item,
            "surface": rng.choice(["feed", "search", "related", "push"], n,
                                  p=[0.6, 0.25, 0.12, 0.03]),
            "device": rng.choice(["ios", "android", "web"], n),
            "click": click,
            "buy": click & (rng.random(n) < 0.2),
            "dwell": np.round(rng.exponential(30, n), 1),
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
    a = p.parse_args(argv)
    generate(a.rows, a.out, a.rows_per_day, a.users, a.items, a.seed)


if __name__ == "__main__":
    main()

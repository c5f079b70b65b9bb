"""The keys of a gemkd dataset's log (``day, ts, user_id, item, domain``) read day by day: what
the policies learn from and the hit rate counts. Only the days asked for are opened, so a view
for day d read from ``[first, d)`` never touches day d's file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from gemkd.transfer.data.dataset_writer import read_day
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError

#: The item-id feature of the known sources, looked for in this order.
ITEM_FEATURES = ("ad_id", "item_id", "video_id", "movie_id")


def item_feature(schema: DatasetSchema, name: str | None = None) -> str:
    """The categorical feature that names a row's item: ``name``, or the schema's item id."""
    names = [f.name for f in schema.categorical]
    found = name or next((n for n in ITEM_FEATURES if n in names), None)
    if found not in names:
        raise ConfigError(f"item feature {found!r} is not a categorical feature of the dataset "
                          f"({', '.join(names)}); name it (solaris.item_feature)")
    return str(found)


def read_log(data: str | Path, days: Iterable[int], item: str) -> pd.DataFrame:
    """``day, ts, user_id, item, domain`` of ``days`` (each day's file read alone, in order)."""
    parts = []
    for d in days:
        t = read_day(data, d, ["ts", "user_id", item, "domain"])
        f = t.to_pandas().rename(columns={item: "item"})
        f.insert(0, "day", d)
        parts.append(f)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64")
                             for c in ("day", "ts", "user_id", "item", "domain")})
    out = pd.concat(parts, ignore_index=True)
    return out.astype({"day": "int64", "ts": "int64", "user_id": "int64", "item": "int64",
                       "domain": "int64"})

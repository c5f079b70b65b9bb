"""The mapping file of ``gemkd data import``: which log columns become what
(docs/guides/your_data.md).

The frozen dataclasses a mapping is read into, strictly and before any data is read, by
:mod:`.mapping_parse` (so a typo never silently drops a feature). Each entry remembers its
mapping key (e.g. ``labels.like.column``) so later data errors can name it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

TIME_UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "iso": 1}  # → nanoseconds
OPS = (">=", ">", "<=", "<", "==", "!=")
BUCKETS = ("log2",)
TRANSFORMS = ("log1p",)
HIST_KINDS = ("item", "domain", "age")  # history fields named by a word; others are mappings
NEGATIVE_SOURCES = ("popularity", "uniform")
ID_ENCODINGS = ("dense", "raw", "hash")  # user/item ids: codes 1..K (default), as read, hashed
# sampled negatives: popularity over the last day; an item first logged within the hour after a
# row is available to it; the item-age check looks at items first logged under an hour before
DEFAULT_WINDOW_HOURS = 24.0
DEFAULT_LOOKAHEAD_HOURS = 1.0
DEFAULT_NEW_ITEM_HOURS = 1.0


@dataclass(frozen=True)
class Time:
    column: str
    unit: str = "s"
    timezone: str = "UTC"  # only for ISO strings without an offset


@dataclass(frozen=True)
class Days:
    calendar: str | None = "UTC"  # day = calendar date in this timezone ...
    buckets: int | None = None     # ... or this many time buckets of equal row counts
    date_column: str | None = None  # calendar only: the log's own date fixes day 0
    # calendar only: keep rows whose local date is in [first, last] (ISO dates, inclusive);
    # ``first`` is then day 0 ("from" and "to" in YAML)
    first: str | None = None
    last: str | None = None

    def to_dict(self) -> dict:
        d = {"calendar": self.calendar, "buckets": self.buckets, "date_column": self.date_column,
             "from": self.first, "to": self.last}
        return {k: v for k, v in d.items() if v is not None}


@dataclass(frozen=True)
class Ids:
    """A user or item id column and how its values become table rows.

    ``dense`` (default): codes ``1..K`` in sorted value order, so a table has one row per id seen
    (plus row 0, missing/unknown); ``raw``: non-negative integer ids kept as read (a table of
    max id + 1 rows); ``hash``: ``1 + hash(value) mod buckets``, for a vocabulary too large to
    keep (the import notes its collision rate).
    """

    column: str
    ids: str = "dense"
    buckets: int | None = None  # hash only
    key: str = ""


@dataclass(frozen=True)
class Domain:
    column: str
    min_share: float = 0.0
    prefix: str = ""
    key: str = "domain"


@dataclass(frozen=True)
class Label:
    name: str
    column: str
    op: str | None = None
    value: float | str | None = None
    key: str = ""


@dataclass(frozen=True)
class Column:
    """A categorical or dense feature: a source column, its output name and one optional rule."""

    column: str
    name: str
    split: str | None = None      # categorical: keep the first item of a delimited list
    bucket: str | None = None     # categorical: "log2" buckets of a non-negative number
    transform: str | None = None  # dense: "log1p"
    key: str = ""


@dataclass(frozen=True)
class HistField:
    name: str                 # output column hist_<name>
    kind: str                 # item | domain | age | label | feature | levels
    ref: str | None = None    # the label or feature a label/feature field copies
    levels: tuple[tuple[str, ...], ...] = ()  # levels: source 0/1 columns, weakest first
    key: str = ""


@dataclass(frozen=True)
class History:
    fields: tuple[HistField, ...]
    max_events: int = 1024


@dataclass(frozen=True)
class SideTable:
    path: str
    key: str               # the key column in the side table
    on: str                # the log column it matches
    categorical: tuple[Column, ...] = ()
    dense: tuple[Column, ...] = ()
    optional: bool = False
    where: str = ""        # mapping key, e.g. side_tables[0]


@dataclass(frozen=True)
class Negatives:
    """Sampled negatives for a positive-only log: ``per_positive`` items per logged row.

    ``lookahead_hours``: an item first logged up to this long after a row is available to it
    (only that the item exists is used: never its rows, counts or labels), so a new item can be
    a negative. ``window_hours`` (popularity only; None: since the log's start): popularity
    counts the rows of this long before the row. ``new_item_hours``: the item-age check's
    threshold (the share of positives and of negatives on items first logged under this long
    before their row).
    """

    per_positive: int
    from_: str          # popularity | uniform ("from" in YAML)
    seed: int = 0
    window_hours: float | None = DEFAULT_WINDOW_HOURS
    lookahead_hours: float = DEFAULT_LOOKAHEAD_HOURS
    new_item_hours: float = DEFAULT_NEW_ITEM_HOURS

    def to_dict(self) -> dict:
        d = {"per_positive": self.per_positive, "from": self.from_, "seed": self.seed}
        if self.from_ == "popularity":
            d["window_hours"] = self.window_hours
        d["lookahead_hours"] = self.lookahead_hours
        d["new_item_hours"] = self.new_item_hours
        return d


@dataclass(frozen=True)
class Mapping:
    source: str
    time: Time
    days: Days
    labels: tuple[Label, ...]
    files: tuple[str, ...] = ("*.csv", "*.parquet")
    user: Ids | None = None
    item: Ids | None = None
    domain: Domain | None = None
    categorical: tuple[Column, ...] = ()
    dense: tuple[Column, ...] = ()
    history: History | None = None
    side_tables: tuple[SideTable, ...] = ()
    negatives: Negatives | None = None
    # a CSV log without a header line: its fields' names in order (``header: false``)
    columns: tuple[str, ...] | None = None
    path: str = "mapping"

    def replace(self, **changes: Any) -> Mapping:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """A JSON-ready record of the mapping actually applied (for ``schema.json``): unset
        options and the bookkeeping of mapping keys are left out."""
        d = _clean(dataclasses.asdict(self))
        if self.columns is not None:  # as written: a headerless log's names
            d = {"header": False, **d}
        d["days"] = self.days.to_dict()
        if self.negatives is not None:
            d["negatives"] = self.negatives.to_dict()
        return d


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()
                if x is not None and x != () and k not in ("key", "where")}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v

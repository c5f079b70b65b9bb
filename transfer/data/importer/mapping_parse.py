"""Reading a mapping file (:mod:`.mapping`) strictly: every key is checked (an unknown key is an
error naming it and listing the valid ones), every value's type too, then the cross-key rules
(unique output names, references that exist), before any data is read."""

from __future__ import annotations

import dataclasses
import datetime
import zoneinfo
from pathlib import Path
from typing import Any

import yaml

from gemkd.transfer.config import load_yaml
from gemkd.transfer.data.importer.mapping import (
    BUCKETS,
    DEFAULT_LOOKAHEAD_HOURS,
    DEFAULT_NEW_ITEM_HOURS,
    DEFAULT_WINDOW_HOURS,
    HIST_KINDS,
    ID_ENCODINGS,
    NEGATIVE_SOURCES,
    OPS,
    TIME_UNITS,
    TRANSFORMS,
    Column,
    Days,
    Domain,
    HistField,
    History,
    Ids,
    Label,
    Mapping,
    Negatives,
    SideTable,
    Time,
)
from gemkd.transfer.data.schema import KEY_COLUMNS, SAMPLED_COLUMN
from gemkd.transfer.errors import ConfigError


def load_mapping(path: str | Path) -> Mapping:
    """Read and check a mapping YAML file (docs/guides/your_data.md).

    Parameters
    ----------
    path
        The mapping file.

    Returns
    -------
    Mapping

    Raises
    ------
    ConfigError
        Naming the file and key of a bad entry.
    """
    return parse_mapping(load_yaml(path, _DatesAsText), str(path))


class _DatesAsText(yaml.SafeLoader):
    """YAML without implicit dates: ``2024-13-45`` stays text, so the mapping's own check
    names the key (PyYAML would raise from inside the parser, naming none)."""


_DatesAsText.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


class _P:
    """Strict readers of YAML values; every error names the file and the key."""

    def __init__(self, path: str) -> None:
        self.path = path

    def err(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.path}: key {key!r}: {msg}")

    def keys(self, d: Any, key: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
             ) -> dict:
        if not isinstance(d, dict):
            raise self.err(key, f"expected a mapping with keys {', '.join(allowed)}, got {d!r}")
        for k in d:
            if k not in allowed:
                raise self.err(f"{key}.{k}" if key else str(k),
                               f"unknown key; valid keys here: {', '.join(allowed)}")
        for k in required:
            if k not in d:
                raise self.err(f"{key}.{k}" if key else k, "missing (required)")
        return d

    def text(self, v: Any, key: str, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(v, str) or not v:
            raise self.err(key, f"expected a non-empty string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.err(key, f"{v!r} is not one of {', '.join(choices)}")
        return v

    def seq(self, v: Any, key: str) -> list:
        if not isinstance(v, list):
            raise self.err(key, f"expected a list, got {v!r}")
        return v

    def integer(self, v: Any, key: str, lo: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise self.err(key, f"expected an integer >= {lo}, got {v!r}")
        return v

    def flag(self, v: Any, key: str) -> bool:
        if not isinstance(v, bool):
            raise self.err(key, f"expected true or false, got {v!r}")
        return v


def parse_mapping(raw: dict, path: str = "mapping") -> Mapping:
    """Check a mapping given as a dict (a parsed YAML file) and build the ``Mapping``."""
    p = _P(path)
    p.keys(raw, "", ("source", "files", "header", "columns", "time", "days", "user", "item",
                     "domain", "labels", "categorical", "dense", "history", "side_tables",
                     "negatives"),
           ("time", "labels"))
    t = raw["time"]
    if isinstance(t, str):
        t = {"column": t}
    p.keys(t, "time", ("column", "unit", "timezone"), ("column",))
    time = Time(p.text(t["column"], "time.column"),
                p.text(t.get("unit", "s"), "time.unit", tuple(TIME_UNITS)),
                _tz(p, t.get("timezone", "UTC"), "time.timezone"))
    m = Mapping(
        source=p.text(raw.get("source", Path(path).stem), "source"),
        files=tuple(p.text(f, f"files[{i}]") for i, f in enumerate(
            p.seq(raw.get("files", ["*.csv", "*.parquet"]), "files"))),
        time=time,
        days=_days(p, raw.get("days", {"calendar": "UTC"})),
        user=_ids(p, raw["user"], "user") if raw.get("user") is not None else None,
        item=_ids(p, raw["item"], "item") if raw.get("item") is not None else None,
        domain=_domain(p, raw["domain"]) if raw.get("domain") is not None else None,
        labels=_labels(p, raw["labels"]),
        categorical=tuple(_column(p, c, f"categorical[{i}]", True)
                          for i, c in enumerate(p.seq(raw.get("categorical", []), "categorical"))),
        dense=tuple(_column(p, c, f"dense[{i}]", False)
                    for i, c in enumerate(p.seq(raw.get("dense", []), "dense"))),
        side_tables=tuple(_side(p, s, f"side_tables[{i}]") for i, s in
                          enumerate(p.seq(raw.get("side_tables", []), "side_tables"))),
        columns=_columns(p, raw),
        path=path,
    )
    if raw.get("history") is not None:
        m = m.replace(history=_history(p, raw["history"], m))
    if raw.get("negatives") is not None:
        m = m.replace(negatives=_negatives(p, raw["negatives"], m))
    check_mapping(m)
    return m


def _columns(p: _P, raw: dict) -> tuple[str, ...] | None:
    """``header: false`` with ``columns``: the names of a headerless CSV log's fields."""
    header = p.flag(raw.get("header", True), "header")
    if header:
        if "columns" in raw:
            raise p.err("columns", "names the fields of a CSV without a header line: give "
                                   "'header: false' too (a log with a header names its own)")
        return None
    if "columns" not in raw:
        raise p.err("columns", "missing (required with header: false: the log's field names "
                               "in order, e.g. [user, item, rating, time])")
    names = tuple(p.text(c, f"columns[{i}]") for i, c in enumerate(p.seq(raw["columns"],
                                                                          "columns")))
    if not names:
        raise p.err("columns", "expected the log's field names in order, got []")
    dup = next((c for i, c in enumerate(names) if c in names[:i]), None)
    if dup is not None:
        raise p.err("columns", f"{dup!r} is named twice")
    return names


def _tz(p: _P, v: Any, key: str) -> str:
    name = p.text(v, key)
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise p.err(key, f"unknown timezone {name!r} (use an IANA name such as UTC or "
                         "Asia/Shanghai)") from None
    return name


def _days(p: _P, d: Any) -> Days:
    p.keys(d, "days", ("calendar", "buckets", "date_column", "from", "to"))
    if "calendar" not in d and "buckets" not in d and d:  # a date range alone: UTC dates
        d = {"calendar": "UTC", **d}
    if ("calendar" in d) == ("buckets" in d):
        raise p.err("days", "give exactly one of 'calendar: TIMEZONE' or 'buckets: N'")
    if "calendar" in d:
        date = d.get("date_column")
        first, last = (_date(p, d[k], f"days.{k}") if d.get(k) is not None else None
                       for k in ("from", "to"))
        if date is not None and (first or last):
            raise p.err("days.date_column", "give 'date_column' or a date range ('from', "
                                             "'to'), not both: each fixes day 0")
        if first and last and last < first:
            raise p.err("days.to", f"{last} is before days.from {first} (the range is "
                                   "inclusive: from <= to)")
        return Days(calendar=_tz(p, d["calendar"], "days.calendar"),
                    date_column=None if date is None else p.text(date, "days.date_column"),
                    first=first, last=last)
    for k in ("date_column", "from", "to"):
        if k in d:
            raise p.err(f"days.{k}", "only with 'calendar' (buckets split the rows as read)")
    return Days(calendar=None, buckets=p.integer(d["buckets"], "days.buckets", 1))


def _date(p: _P, v: Any, key: str) -> str:
    """A calendar date (YAML's unquoted 2020-01-09, or the text) as ISO ``YYYY-MM-DD``."""
    if isinstance(v, datetime.datetime) or not isinstance(v, datetime.date | str):
        raise p.err(key, f"expected a date such as 2020-01-09, got {v!r}")
    try:
        return (v if isinstance(v, datetime.date) else datetime.date.fromisoformat(v)).isoformat()
    except ValueError:
        raise p.err(key, f"expected a date such as 2020-01-09, got {v!r}") from None


def _ids(p: _P, v: Any, key: str) -> Ids:
    """``column`` or ``{column, ids, buckets}``; ``codes: true/false`` is the older spelling of
    ``ids: dense/raw`` (dense codes were opt-in before they became the default)."""
    if isinstance(v, str):
        v = {"column": v}
    p.keys(v, key, ("column", "ids", "buckets", "codes"), ("column",))
    if "codes" in v and "ids" in v:
        raise p.err(f"{key}.codes", "give 'ids' (dense, raw or hash) or the older 'codes', "
                                    "not both")
    if "codes" in v:
        ids = "dense" if p.flag(v["codes"], f"{key}.codes") else "raw"
    else:
        ids = p.text(v.get("ids", "dense"), f"{key}.ids", ID_ENCODINGS)
    buckets = None
    if ids == "hash":
        if "buckets" not in v:
            raise p.err(f"{key}.buckets", "missing (required with ids: hash: the number of "
                                          "hash buckets, e.g. 1000000)")
        buckets = p.integer(v["buckets"], f"{key}.buckets", 1)
    elif "buckets" in v:
        raise p.err(f"{key}.buckets", f"only with ids: hash (here ids: {ids})")
    return Ids(p.text(v["column"], f"{key}.column"), ids, buckets, key)


def _domain(p: _P, v: Any) -> Domain:
    if isinstance(v, str):
        v = {"column": v}
    p.keys(v, "domain", ("column", "min_share", "prefix"), ("column",))
    share = v.get("min_share", 0.0)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1:
        raise p.err("domain.min_share", f"expected a number in [0, 1), got {share!r}")
    prefix = v.get("prefix", "")
    if not isinstance(prefix, str):
        raise p.err("domain.prefix", f"expected a string, got {prefix!r}")
    return Domain(p.text(v["column"], "domain.column"), float(share), prefix)


def _labels(p: _P, v: Any) -> tuple[Label, ...]:
    if not isinstance(v, dict) or not v:
        raise p.err("labels", f"expected a mapping of task name to column, got {v!r}")
    out = []
    for name, spec in v.items():
        key = f"labels.{name}"
        p.text(name, key)
        if isinstance(spec, str):
            spec = {"column": spec}
        p.keys(spec, key, ("column", "op", "value"), ("column",))
        op, value = spec.get("op"), spec.get("value")
        if (op is None) != (value is None):
            raise p.err(key, "give both 'op' and 'value' (a threshold) or neither")
        if op is not None:
            p.text(op, f"{key}.op", OPS)
            if isinstance(value, str) and op not in ("==", "!="):
                raise p.err(f"{key}.value", f"a text value needs op == or !=, not {op}")
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise p.err(f"{key}.value", f"expected a number or a string, got {value!r}")
        out.append(Label(name, p.text(spec["column"], f"{key}.column"), op, value, key))
    return tuple(out)


def _column(p: _P, v: Any, key: str, categorical: bool) -> Column:
    if isinstance(v, str):
        v = {"column": v}
    rules = ("split", "bucket") if categorical else ("transform",)
    p.keys(v, key, ("column", "name", *rules), ("column",))
    col = p.text(v["column"], f"{key}.column")
    c = Column(col, p.text(v.get("name", col), f"{key}.name"), key=key)
    if "split" in v:
        c = dataclasses.replace(c, split=p.text(v["split"], f"{key}.split"))
    if "bucket" in v:
        c = dataclasses.replace(c, bucket=p.text(v["bucket"], f"{key}.bucket", BUCKETS))
    if "transform" in v:
        c = dataclasses.replace(c, transform=p.text(v["transform"], f"{key}.transform",
                                                   TRANSFORMS))
    if c.split and c.bucket:
        raise p.err(key, "give 'split' or 'bucket', not both")
    return c


def _side(p: _P, v: Any, key: str) -> SideTable:
    p.keys(v, key, ("path", "key", "on", "categorical", "dense", "optional"), ("path", "key"))
    k = p.text(v["key"], f"{key}.key")
    return SideTable(
        path=p.text(v["path"], f"{key}.path"), key=k, on=p.text(v.get("on", k), f"{key}.on"),
        categorical=tuple(_column(p, c, f"{key}.categorical[{i}]", True) for i, c in
                          enumerate(p.seq(v.get("categorical", []), f"{key}.categorical"))),
        dense=tuple(_column(p, c, f"{key}.dense[{i}]", False) for i, c in
                    enumerate(p.seq(v.get("dense", []), f"{key}.dense"))),
        optional=p.flag(v.get("optional", False), f"{key}.optional"), where=key)


def _history(p: _P, v: Any, m: Mapping) -> History:
    p.keys(v, "history", ("fields", "max_events"))
    if m.user is None:
        raise p.err("history", "needs 'user': a history is the user's earlier events")
    default = {"item_id": "item", "age": "age"} if m.item is not None else None
    fields = v.get("fields", default)
    if not isinstance(fields, dict) or not fields:
        raise p.err("history.fields", f"expected a mapping of field name to source, got "
                                      f"{fields!r}")
    out = []
    for name, src in fields.items():
        key = f"history.fields.{name}"
        p.text(name, key)
        if isinstance(src, str):
            p.text(src, key, HIST_KINDS)
            f = HistField(name, src, key=key)
        else:
            p.keys(src, key, ("label", "feature", "levels"))
            if len(src) != 1:
                raise p.err(key, "give exactly one of label, feature, levels")
            (kind, ref), = src.items()
            if kind == "levels":
                levels = tuple(tuple(p.text(c, f"{key}.levels[{i}][{j}]") for j, c in
                                     enumerate([lv] if isinstance(lv, str) else
                                               p.seq(lv, f"{key}.levels[{i}]")))
                               for i, lv in enumerate(p.seq(ref, f"{key}.levels")))
                f = HistField(name, "levels", levels=levels, key=key)
            else:
                f = HistField(name, kind, p.text(ref, f"{key}.{kind}"), key=key)
        out.append(f)
    return History(tuple(out), p.integer(v.get("max_events", 1024), "history.max_events", 1))


def _negatives(p: _P, v: Any, m: Mapping) -> Negatives:
    p.keys(v, "negatives", ("per_positive", "from", "seed", "window_hours", "lookahead_hours",
                            "new_item_hours"), ("per_positive", "from"))
    for role in ("user", "item"):
        if getattr(m, role) is None:
            raise p.err("negatives", f"needs {role!r}: a negative is an item its user had not "
                                     "engaged with")
    source = p.text(v["from"], "negatives.from", NEGATIVE_SOURCES)
    window: float | None = None
    if source == "popularity":
        raw = v.get("window_hours", DEFAULT_WINDOW_HOURS)
        window = None if raw is None else _hours(p, raw, "negatives.window_hours", " or null")
    elif "window_hours" in v:
        raise p.err("negatives.window_hours", "only with from: popularity (uniform draws from "
                                              "every item available by then)")
    ahead = v.get("lookahead_hours", DEFAULT_LOOKAHEAD_HOURS)
    if isinstance(ahead, bool) or not isinstance(ahead, int | float) or ahead < 0:
        raise p.err("negatives.lookahead_hours", f"expected a number >= 0, got {ahead!r}")
    return Negatives(p.integer(v["per_positive"], "negatives.per_positive", 1), source,
                     p.integer(v.get("seed", 0), "negatives.seed", 0), window, float(ahead),
                     _hours(p, v.get("new_item_hours", DEFAULT_NEW_ITEM_HOURS),
                            "negatives.new_item_hours"))


def _hours(p: _P, v: Any, key: str, alternative: str = "") -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
        raise p.err(key, f"expected a number > 0{alternative}, got {v!r}")
    return float(v)


def check_mapping(m: Mapping) -> None:
    """Cross-key rules: unique output names, references that exist, ids kept as int64."""
    p = _P(m.path)
    used: dict[str, str] = {k: "(a key column every dataset has)" for k in KEY_COLUMNS}
    if m.user is not None:
        used["user_id"] = "user"

    def claim(name: str, key: str) -> None:
        if name in used and not (name == "user_id" and key == "user"):
            raise p.err(key, f"output name {name!r} is already used by {used[name]}")
        used[name] = f"key {key!r}"

    if m.item is not None:
        claim("item_id", "item")
    if m.negatives is not None:
        claim(SAMPLED_COLUMN, "negatives")
    id_cols = {c.column: c.key for c in (m.user, m.item) if c is not None}
    cats = [*m.categorical, *(c for s in m.side_tables for c in s.categorical)]
    for c in [*m.categorical, *m.dense]:
        if c.column in id_cols:
            raise p.err(c.key, f"column {c.column!r} is the {id_cols[c.column]} column; it is "
                               "already the feature user_id / item_id")
    for c in [*cats, *m.dense, *(c for s in m.side_tables for c in s.dense)]:
        claim(c.name, c.key)
    for lab in m.labels:
        claim(lab.name, lab.key)
    if m.history is None:
        return
    features = {c.name for c in cats}
    tasks = {lab.name for lab in m.labels}
    for f in m.history.fields:
        claim(f"hist_{f.name}", f.key)
        if f.kind == "item" and m.item is None:
            raise p.err(f.key, "history field 'item' needs the mapping's 'item' column")
        if f.kind == "item" and not f.name.endswith("_id"):
            raise p.err(f.key, f"name the item field '..._id' (e.g. item_id), not {f.name!r}: "
                               "only *_id history fields are stored as int64")
        if f.kind == "domain" and m.domain is None:
            raise p.err(f.key, "history field 'domain' needs the mapping's 'domain' column")
        if f.kind == "label" and f.ref not in tasks:
            raise p.err(f.key, f"unknown label {f.ref!r}; labels: {', '.join(sorted(tasks))}")
        if f.kind == "feature" and f.ref not in features:
            raise p.err(f.key, f"unknown categorical feature {f.ref!r}; features: "
                               f"{', '.join(sorted(features))}")

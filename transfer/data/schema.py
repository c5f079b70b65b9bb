"""The dataset contract: ``schema.json`` beside every Parquet dataset (DESIGN §2.1).

It records what a model needs to build itself (features, cardinalities, tasks, domains) and the
exact Arrow type of every column, so the reader can reject a file that drifted from it before any
tensor is built.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from gemkd.transfer.errors import ConfigError, DataError
from gemkd.transfer.io import fs

SCHEMA_FILE = "schema.json"
SCHEMA_VERSION = 1

# Columns every dataset carries, whatever its source, with their Arrow types.
KEY_COLUMNS: dict[str, pa.DataType] = {
    "example_id": pa.int64(),
    "ts": pa.int64(),
    "day": pa.int32(),
    "domain": pa.int16(),
    "user_id": pa.int64(),
}
LABEL_TYPE = pa.int8()
ORACLE_TYPE = pa.float32()
DENSE_TYPE = pa.float32()
CATEGORICAL_TYPE = pa.int64()
SAMPLED_COLUMN = "sampled"  # 1 on a sampled negative, 0 on a logged row (``negatives`` set)
SAMPLED_TYPE = pa.int8()


@dataclass(frozen=True)
class Feature:
    """A categorical feature or sequence event field; ids are hashed modulo ``cardinality``."""

    name: str
    cardinality: int


@dataclass
class DatasetSchema:
    """What ``schema.json`` holds; see docs/guides/data.md for every key."""

    source: str
    categorical: list[Feature]
    dense: list[str]
    sequence: list[Feature]
    tasks: list[str]
    domains: list[str]
    days: list[int]
    max_history: int
    oracle: dict[str, str] = field(default_factory=dict)
    column_types: dict[str, str] = field(default_factory=dict)
    rows_per_day: dict[str, int] = field(default_factory=dict)
    generator: dict = field(default_factory=dict)
    negatives: dict | None = None  # {per_positive, from, seed} when negatives were sampled
    #: ``day=N/part-K.parquet`` → its sha256 (``part_digests``), taken by :meth:`save`; empty
    #: in a dataset of a gemkd that did not record them
    part_sha256: dict[str, str] = field(default_factory=dict)
    #: id column → its raw value → code vocabulary (``vocabulary.py``: rule, file, sha256);
    #: empty for data without raw ids (synthetic) or of a gemkd that did not record them
    vocabularies: dict[str, dict] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def n_rows(self) -> int:
        return sum(self.rows_per_day.values())

    def check_days(self, key: str, days: tuple[int, int] | list[int], where: object) -> None:
        """Every day of the half-open window ``days`` is in the data (see :func:`check_window`)."""
        check_window(key, days, self.days, where)

    def check_domain(self, key: str, domain: str, where: object) -> None:
        check_domain(key, domain, self.domains, where)

    def arrow_schema(self) -> pa.Schema:
        """The physical schema of the Parquet files (``day`` is the Hive partition key)."""
        cols: list[pa.Field] = [pa.field(n, t) for n, t in KEY_COLUMNS.items()]
        seen = set(KEY_COLUMNS)
        for f in self.categorical:
            if f.name not in seen:
                cols.append(pa.field(f.name, CATEGORICAL_TYPE))
                seen.add(f.name)
        cols += [pa.field(n, DENSE_TYPE) for n in self.dense]
        cols += [pa.field(f.name, seq_type(f.name)) for f in self.sequence]
        cols += [pa.field(t, LABEL_TYPE) for t in self.tasks]
        cols += [pa.field(c, ORACLE_TYPE) for c in self.oracle.values()]
        if self.negatives is not None:
            cols.append(pa.field(SAMPLED_COLUMN, SAMPLED_TYPE))
        return pa.schema(cols)

    def to_json(self) -> str:
        d = asdict(self)
        d["column_types"] = {f.name: str(f.type) for f in self.arrow_schema()}
        if d["negatives"] is None:  # logged data only: schema.json as before the key existed
            del d["negatives"]
        if not d["part_sha256"]:  # no part files (yet): no key, as before digests existed
            del d["part_sha256"]
        if not d["vocabularies"]:  # no raw ids: no key
            del d["vocabularies"]
        return json.dumps(d, indent=2, sort_keys=True)

    def save(self, directory: str | Path) -> None:
        """Write ``schema.json`` into the local folder of a dataset being made, with the
        sha256 of every part file of its days there (``part_sha256``): every writer saves the
        schema last, once its files are complete, so every dataset records its digests."""
        from gemkd.transfer.data.part_digests import digest_parts
        from gemkd.transfer.data.vocabulary import digest_vocabularies

        self.part_sha256 = digest_parts(directory, self.days)
        digest_vocabularies(directory, self.vocabularies)
        Path(directory, SCHEMA_FILE).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> DatasetSchema:
        """Read ``schema.json`` of the dataset at ``directory`` (a path or an ``s3://`` URI);
        written last, it is the dataset's commit marker: without it there is no dataset."""
        path = fs.join(directory, SCHEMA_FILE)
        if not fs.is_dir(directory):
            raise DataError(f"{directory}: not a directory (expected a gemkd dataset)")
        if not fs.is_file(path):
            raise DataError(
                f"{path}: missing; a gemkd dataset is Parquet files plus schema.json "
                "(written by `gemkd data synth`, `movielens`, `kuairand` or `import`)"
            )
        try:
            raw = json.loads(fs.read_bytes(path).decode())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: not valid JSON ({e})") from None
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise DataError(
                f"{path}: schema_version {version!r}, this gemkd reads version "
                f"{SCHEMA_VERSION}; regenerate the dataset with this version"
            )
        try:
            raw["categorical"] = [Feature(**f) for f in raw["categorical"]]
            raw["sequence"] = [Feature(**f) for f in raw["sequence"]]
            schema = cls(**raw)
        except (KeyError, TypeError) as e:
            raise DataError(f"{path}: malformed schema ({e})") from None
        digests = schema.part_sha256
        if not isinstance(digests, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and len(v) == 64
                for k, v in digests.items()):
            raise DataError(f"{path}: 'part_sha256' must map part files to 64-digit sha256s")
        if not isinstance(schema.vocabularies, dict) or not all(
                isinstance(v, dict) and "rule" in v for v in schema.vocabularies.values()):
            raise DataError(f"{path}: 'vocabularies' must map columns to {{rule, ...}} entries")
        return schema


def check_window(key: str, days: tuple[int, int] | list[int], have: list[int],
                 where: object) -> None:
    """A window reaching past the data (or over a missing day) is a ConfigError naming the
    window and the data's days: never silently clipped to what exists."""
    first, end = days
    present = set(have)
    missing = [d for d in range(first, end) if d not in present]
    if missing:
        ordered = sorted(present)
        runs = day_span(ordered).count(",") + 1 if ordered else 0
        has = (f"days {day_span(ordered)}" if runs <= MAX_RUNS else
               f"{len(ordered):,} days in {ordered[0]}..{ordered[-1]}, {runs - 1:,} gaps "
               "(days: {buckets: N} has none)")
        raise ConfigError(f"{key} [{first}, {end}): day{'s' if len(missing) > 1 else ''} "
                          f"{day_span(missing, MAX_RUNS - 1)} not in {where}, which has {has}")


def day_range(days: Sequence[int]) -> tuple[int, int]:
    """A config's ``[first, end)`` window (a two-item list in YAML, checked where it is loaded)
    as the pair the readers take."""
    first, end = days
    return first, end


def check_domain(key: str, domain: str, domains: list[str], where: object) -> None:
    """A ``key`` (``student_domain``) naming a domain the data lacks is one error naming the
    domains it has, and that leaving the key out uses every domain (a single-domain log's one
    domain is ``all``, which reads as a keyword, not a name)."""
    if domain not in domains:
        raise ConfigError(f"{key} {domain!r}: no such domain in {where}, which has "
                          f"domain{'s' if len(domains) != 1 else ''} "
                          f"{', '.join(repr(d) for d in domains)}; leave {key} out for every "
                          "domain")


MAX_RUNS = 3  # a window error names this many runs of days, then counts the rest


def day_span(days: list[int], limit: int | None = None) -> str:
    """``[0, 1, 2, 5]`` → ``"0..2, 5"``; with ``limit``, the first ``limit`` runs and a count
    of the rest (an error stays one short line over thousands of days)."""
    parts, i = [], 0
    while i < len(days):
        j = i
        while j + 1 < len(days) and days[j + 1] == days[j] + 1:
            j += 1
        parts.append(str(days[i]) if i == j else f"{days[i]}..{days[j]}")
        i = j + 1
    if limit is not None and len(parts) > limit:
        return f"{', '.join(parts[:limit])} +{len(parts) - limit:,} runs"
    return ", ".join(parts) if parts else "none"


def seq_type(name: str) -> pa.DataType:
    """Item ids are int64; small-vocabulary event fields (action, age bucket) are int32."""
    return pa.list_(pa.int64() if name.endswith("_id") else pa.int32())

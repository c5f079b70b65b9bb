"""Side tables: per-key features (e.g. item features by item id) joined onto the log's rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.transfer.data import vocabulary
from gemkd.transfer.data.importer import encode, source
from gemkd.transfer.data.importer.mapping import Column, Mapping, SideTable
from gemkd.transfer.errors import ConfigError, DataError


@dataclass
class Joined:
    """One side table's features, aligned with the log's rows (0 / 0.0 where no key matched)."""

    categorical: dict[str, tuple[np.ndarray, int]]  # name → (codes, cardinality)
    dense: dict[str, np.ndarray]
    matched: float                                   # share of log rows with a match


def resolve(m: Mapping, base: Path, notes: list[str]) -> list[tuple[SideTable, Path]]:
    """The side tables present under ``base`` (a path may be a glob matching one file)."""
    found = []
    for s in m.side_tables:
        pattern = Path(s.path)
        matches = ([pattern] if pattern.is_absolute() and pattern.exists() else
                   sorted(base.glob(s.path)) if not pattern.is_absolute() else [])
        if len(matches) > 1:
            raise ConfigError(f"{m.path}: key '{s.where}.path': {s.path!r} matches "
                              f"{len(matches)} files in {base} "
                              f"({', '.join(p.name for p in matches[:5])}); name one")
        if not matches:
            if not s.optional:
                raise DataError(f"{base / s.path}: side table not found (mapping key "
                                f"'{s.where}.path'; set optional: true to go without it)")
            notes.append(f"side table {s.path} not found in {base}: its features "
                         f"({', '.join(c.name for c in (*s.categorical, *s.dense))}) are left "
                         "out")
            continue
        found.append((s, matches[0]))
    return found


def join(m: Mapping, s: SideTable, path: Path, on: pd.Series) -> Joined:
    """Read side table ``path`` and align its features with the log's key column ``on``."""
    return load(m, s, path).align(on)


@dataclass
class Loaded:
    """A side table read and checked once, to align with any number of batches of the log."""

    keys: pd.Series
    categorical: dict[str, tuple[np.ndarray, int]]  # name → (codes per side row, cardinality)
    dense: dict[str, np.ndarray]                    # name → float32 per side row
    vocab: dict[str, vocabulary.Vocabulary]         # name → its raw value → code rule

    def align(self, on: pd.Series) -> Joined:
        keys = self.keys
        numeric = pd.api.types.is_numeric_dtype(keys) and pd.api.types.is_numeric_dtype(on)
        index = pd.Index(keys if numeric else keys.astype("string"))
        idx = index.get_indexer(on if numeric else on.astype("string"))
        hit = idx >= 0
        categorical = {name: (np.where(hit, codes[idx], 0), card)
                       for name, (codes, card) in self.categorical.items()}
        dense = {name: np.where(hit, v[idx], 0.0).astype(np.float32)
                 for name, v in self.dense.items()}
        return Joined(categorical, dense, float(hit.mean()) if len(hit) else 0.0)


def load(m: Mapping, s: SideTable, path: Path) -> Loaded:
    """Read side table ``path`` and check its keys and feature columns."""
    cols = source.header(path)
    wanted = {s.key: f"{s.where}.key"}
    wanted.update({c.column: c.key for c in (*s.categorical, *s.dense)})
    for col, key in wanted.items():
        if col not in cols:
            raise ConfigError(f"{m.path}: key {key!r}: column {col!r} is not in side table "
                              f"{path} (its columns: {', '.join(cols[:30])})")
    df = source.read(path, list(wanted))
    keys = df[s.key]
    if keys.isna().any():
        i = int(np.argmax(keys.isna().to_numpy()))
        raise DataError(f"{path}: column {s.key!r} {source.place(path, i)}: empty key "
                        f"(mapping key '{s.where}.key')")
    dup = keys.duplicated().to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        raise DataError(f"{path}: column {s.key!r} {source.place(path, i)}: key "
                        f"{source.show(keys.iloc[i])} repeats an earlier row (a side table "
                        f"has one row per key; mapping key '{s.where}.key')")
    categorical = {c.name: categorical_codes(df[c.column], path, c) for c in s.categorical}
    dense = {c.name: dense_values(df[c.column], path, c) for c in s.dense}
    vocab = {c.name: column_vocabulary(df[c.column], c, f"side table {s.path} column "
                                       f"{c.column!r}, by its key {s.key!r}")
             for c in s.categorical}
    return Loaded(keys, categorical, dense, vocab)


def categorical_codes(values: pd.Series, path: Path, c: Column) -> tuple[np.ndarray, int]:
    """A categorical column's codes and cardinality under its rule (plain, split or bucket)."""
    if c.bucket == "log2":
        return encode.log2_buckets(source.numbers(values, path, c.key, missing_ok=True))
    return encode.codes(encode.first_item(values, c.split) if c.split else values)


def column_vocabulary(values: pd.Series, c: Column, where: str) -> vocabulary.Vocabulary:
    """The raw value → code rule of a categorical column (:func:`categorical_codes`'s)."""
    if c.bucket == "log2":
        return vocabulary.rule_only("log2", where)
    uniq = encode.factorize(encode.first_item(values, c.split) if c.split else values)[1]
    return vocabulary.dense(uniq, where, c.split)


def dense_values(values: pd.Series, path: Path, c: Column) -> np.ndarray:
    """A dense column as float32: missing → 0, ``log1p`` of max(x, 0) if asked."""
    v = np.nan_to_num(source.numbers(values, path, c.key, missing_ok=True), nan=0.0)
    if c.transform == "log1p":
        v = np.log1p(np.maximum(v, 0.0))
    return v.astype(np.float32)

"""Id vocabularies: which code an imported dataset gave each raw value of an id column
(DESIGN §2.1), kept so that a model trained on codes can be served raw ids.

``gemkd data import`` writes one Parquet file per encoded column under ``vocab/`` (columns
``value``, the raw value as the import compared it, and ``code``, int64) and lists every column
in ``schema.json``'s ``vocabularies``: its rule, its file, and the file's sha256 (taken by
``DatasetSchema.save`` with the part digests, checked before a vocabulary is used). The rules
are the importer's (``importer/encode.py``):

``dense``   codes ``1..K`` in sorted value order; a value not in the file (unseen, missing) is
            code 0, the row the import gives an unknown or missing value (``split``: the first
            item of a delimited list is the value)
``domain``  each value's domain index; an unseen value is the ``unknown`` index (``other``)
``hash``    ``1 + hash(value) mod buckets``: any value has a code; the file lists the ids seen
``raw``     non-negative integer ids are their own codes (no file)
``log2``    ``1 + floor(log2(1 + x))`` of a number, 0 for a missing or negative one (no file)

A history field that copies a column (``hist_item``: ``item_id``) has that column's entry.
Datasets with no raw ids (``gemkd data synth``: its ids are drawn as codes) list none.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.errors import ConfigError, DataError
from gemkd.transfer.io import fs
from gemkd.transfer.io.integrity import sha256_file

VOCAB_DIR = "vocab"
RULES = ("dense", "domain", "hash", "raw", "log2")
#: what a dataset without ``vocabularies`` means, for error messages
NO_VOCABULARIES = ("lists no id vocabularies: its ids are codes already (a synthetic dataset "
                   "has no raw ids), or it was made before gemkd recorded them (re-import it)")


@dataclass(frozen=True)
class Vocabulary:
    """One column's raw value → code rule, with the values and codes of a table rule."""

    rule: str
    source: str                       # where the raw values come from, for a reader
    values: pd.Index | None = None    # dense, domain, hash: the raw values
    codes: np.ndarray | None = None   # their codes
    unknown: int | None = 0           # the code of a value not in ``values`` (None: hash)
    buckets: int | None = None        # hash
    split: str | None = None          # dense: the value is a list's first item

    def entry(self, file: str | None) -> dict[str, Any]:
        """Its ``schema.json`` entry (the file's sha256 is added on save)."""
        e: dict[str, Any] = {"rule": self.rule, "source": self.source}
        if file is not None:
            e.update(file=file, size=len(self.values) if self.values is not None else 0)
        if self.rule in ("dense", "domain"):
            e["unknown"] = self.unknown
        if self.buckets is not None:
            e["buckets"] = self.buckets
        if self.split is not None:
            e["split"] = self.split
        return e


def dense(uniq: pd.Index, source: str, split: str | None = None) -> Vocabulary:
    """Codes ``1..K`` of the sorted distinct values ``uniq`` (``encode.codes``)."""
    return Vocabulary("dense", source, uniq, np.arange(1, len(uniq) + 1, dtype=np.int64),
                      split=split)


def domain(uniq: pd.Index, table: np.ndarray, source: str) -> Vocabulary:
    """Domain indices of the sorted distinct values (``table[0]``: a missing value's)."""
    return Vocabulary("domain", source, uniq, table[1:].astype(np.int64),
                      unknown=int(table[0]))


def hashed(distinct: pd.Series, buckets: int, source: str) -> Vocabulary:
    """The seen ids (as text, sorted) and their buckets; any other id hashes as well."""
    from gemkd.transfer.data.importer.encode import hashed as hash_ids

    text = pd.Index(distinct.drop_duplicates().astype(str).unique()).sort_values()
    return Vocabulary("hash", source, text, hash_ids(pd.Series(text), buckets).codes,
                      unknown=None, buckets=buckets)


def rule_only(rule: str, source: str) -> Vocabulary:
    """``raw`` or ``log2``: a rule without a table."""
    return Vocabulary(rule, source, unknown=None)


def write_vocabularies(vocabs: dict[str, Vocabulary], root: str | Path,
                       aliases: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Write each table vocabulary to ``root/vocab/<column>.parquet`` (a dataset's staging
    folder) and return the ``schema.json`` entries; ``aliases`` maps a history field to the
    column whose vocabulary it shares."""
    entries: dict[str, dict[str, Any]] = {}
    for column, v in vocabs.items():
        file = None
        if v.values is not None:
            assert v.codes is not None  # every table rule has codes
            file = f"{VOCAB_DIR}/{column}.parquet"
            Path(root, VOCAB_DIR).mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"value": _arrow(v.values), "code": pa.array(
                v.codes, type=pa.int64())}), Path(root, file))
        entries[column] = v.entry(file)
    for field, column in (aliases or {}).items():
        if column in entries:
            entries[field] = dict(entries[column])
    return entries


def _arrow(values: pd.Index) -> pa.Array:
    """The raw values as one plain Arrow type (text as ``string``, whatever pandas held)."""
    arr = pa.array(values.to_numpy() if values.dtype == object else values)
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    return arr


def digest_vocabularies(root: str | Path, entries: dict[str, dict[str, Any]]) -> None:
    """Record each entry's file sha256 (``DatasetSchema.save``, as it records the parts')."""
    for e in entries.values():
        if "file" in e:
            e["sha256"] = sha256_file(fs.join(root, e["file"]))


def load_vocabulary(root: str | Path, column: str, entries: dict[str, dict[str, Any]]
                    ) -> Vocabulary:
    """Column ``column``'s vocabulary of the dataset (or artifact) at ``root``, its file
    checked against its sha256.

    Raises
    ------
    ConfigError
        No vocabulary for ``column`` (naming those there are).
    DataError
        The file is missing or differs from the digest ``schema.json`` lists.
    """
    if not entries:
        raise ConfigError(f"{root}: {NO_VOCABULARIES}")
    if column not in entries:
        raise ConfigError(f"{root}: no id vocabulary for column {column!r}; it has "
                          f"{', '.join(sorted(entries))}")
    e = entries[column]
    if e["rule"] not in RULES:
        raise DataError(f"{root}: vocabulary of {column!r}: unknown rule {e['rule']!r} "
                        f"(one of {', '.join(RULES)})")
    if "file" not in e:
        return Vocabulary(e["rule"], e["source"], unknown=None)
    path = fs.join(root, e["file"])
    if not fs.is_file(path):
        raise DataError(f"{path}: missing (the vocabulary of {column!r} schema.json lists)")
    digest = sha256_file(path)
    if digest != e.get("sha256"):
        raise DataError(f"{path}: sha256 {digest[:12]}... differs from the one schema.json "
                        "lists (the file changed after the dataset was made)")
    table = pq.read_table(io.BytesIO(fs.read_bytes(path)))
    return Vocabulary(e["rule"], e["source"], pd.Index(table.column("value").to_pandas()),
                      table.column("code").to_numpy(), e.get("unknown"), e.get("buckets"),
                      e.get("split"))


def verify_vocabularies(root: str | Path, entries: dict[str, dict[str, Any]]) -> None:
    """Every vocabulary file listed hashes to its sha256 (``gemkd data validate``)."""
    for column in entries:
        load_vocabulary(root, column, entries)


def encode(v: Vocabulary, values: Sequence[Any] | np.ndarray | pd.Series, column: str = ""
           ) -> np.ndarray:
    """The codes (int64) the import gives ``values`` under vocabulary ``v``: what a row with
    these raw values would hold in the dataset; an unseen value gets the rule's unknown code.

    Raises
    ------
    ValueError
        A ``raw`` id that is not a non-negative integer (naming ``column`` and the value).
    """
    from gemkd.transfer.data.importer import encode as enc

    if isinstance(values, pd.Series):
        s = values.reset_index(drop=True)
    else:
        s = pd.Series(values if isinstance(values, np.ndarray) else list(values))
    if v.rule == "log2":
        return enc.log2_buckets(pd.to_numeric(s, errors="coerce").to_numpy(dtype=float))[0]
    if v.rule == "raw":
        num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        bad = ~(np.isfinite(num) & (num >= 0) & (num == np.floor(num)))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"column {column!r}: value {s.iloc[i]!r} (position {i}) is not a "
                             "non-negative integer id (the rule is 'raw': ids are codes)")
        return num.astype(np.int64)
    assert v.values is not None and v.codes is not None  # the table rules
    if v.rule == "hash":
        assert v.buckets is not None  # a hash entry records its buckets
        out = np.zeros(len(s), dtype=np.int64)  # a missing id: row 0
        ok = s.notna().to_numpy()
        if ok.any():
            out[ok] = enc.hashed(s[ok].reset_index(drop=True), v.buckets).codes
        return out
    if v.split is not None:
        s = enc.first_item(s, v.split)
    idx = v.values.get_indexer(enc.as_compared(s, v.values))
    unknown = int(v.unknown or 0)
    return np.where(idx >= 0, v.codes[np.maximum(idx, 0)], unknown).astype(np.int64)

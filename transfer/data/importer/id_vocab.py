"""Which vocabulary each column of an import gets (``vocabulary.py``): the entries the in-memory,
streamed and Ray imports all write, so their datasets list the same ones."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gemkd.transfer.data import vocabulary
from gemkd.transfer.data.importer.mapping import Column, Ids, Mapping


def history_aliases(m: Mapping) -> dict[str, str]:
    """History fields that hold a column's codes → that column (they share its vocabulary)."""
    out = {}
    for f in m.history.fields if m.history else ():
        column = {"item": "item_id", "domain": "domain", "feature": f.ref}.get(f.kind)
        if column is not None:
            out[f"hist_{f.name}"] = column
    return out


def id_source(ids: Ids) -> str:
    """Where an id column's raw values come from, for its vocabulary entry."""
    return f"log column {ids.column!r} (mapping key {ids.key!r}, ids: {ids.ids})"


def domain_source(m: Mapping) -> str:
    assert m.domain is not None
    return (f"log column {m.domain.column!r} (mapping key 'domain', min_share "
            f"{m.domain.min_share})")


def categorical_vocabulary(c: Column, uniq: pd.Index | None) -> vocabulary.Vocabulary:
    """A log categorical column's vocabulary (``uniq``: its sorted values; None: log2)."""
    where = f"log column {c.column!r} (mapping key {c.key!r})"
    if uniq is None:
        return vocabulary.rule_only("log2", where)
    return vocabulary.dense(uniq, where, c.split)



def write(vocabs: dict[str, vocabulary.Vocabulary], root: str | Path, m: Mapping
          ) -> dict[str, dict]:
    """Write an import's vocabularies into its staging folder ``root``; the schema's
    ``vocabularies`` entries (history fields sharing their column's)."""
    return vocabulary.write_vocabularies(vocabs, root, history_aliases(m))

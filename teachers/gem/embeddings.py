"""Feature embeddings: hashed tables per categorical feature, shared tables for sequence fields,
dense features projected to tokens (DESIGN §3, "Embeddings").

Everything is built from the :class:`~gemkd.transfer.data.schema.DatasetSchema`: one table per
categorical feature with ``min(cardinality, max_rows)`` rows (ids hashed modulo the row count),
one table per sequence event field unless ``shared_tables`` maps it onto a categorical feature's
table (item ids share the ad-id table, so a history event and a candidate ad live in one space).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.layers import SHARED_TABLES, HashedEmbedding, default_shared_tables

__all__ = ["SHARED_TABLES", "FeatureEmbeddings", "HashedEmbedding", "resolve_shared_tables"]


def resolve_shared_tables(
    schema: DatasetSchema, shared_tables: dict[str, str] | None
) -> dict[str, str]:
    """The sequence-field → categorical-feature sharing map, validated against the schema.

    ``None`` takes :data:`SHARED_TABLES` restricted to the pairs present in the schema;
    an explicit map must only name fields and features the schema has.
    """
    cat = {f.name for f in schema.categorical}
    seq = {f.name for f in schema.sequence}
    if shared_tables is None:
        return default_shared_tables(sorted(seq), sorted(cat))
    for s, c in shared_tables.items():
        if s not in seq:
            raise ConfigError(
                f"shared_tables: {s!r} is not a sequence field of this dataset "
                f"(sequence fields: {sorted(seq)})"
            )
        if c not in cat:
            raise ConfigError(
                f"shared_tables: {s!r} -> {c!r}, but {c!r} is not a categorical feature "
                f"(categorical features: {sorted(cat)})"
            )
    return dict(shared_tables)


class FeatureEmbeddings(nn.Module):
    """Embeds a :class:`Batch` into non-sequence tokens and jagged sequence events.

    ``tokens(batch) -> [B, n_tokens, d]``: one token per categorical feature (schema order), then
    ``n_dense_tokens`` tokens projected from the (symlog-squashed) dense features, then a domain
    token. ``events(values, names) -> [N, d]``: the sum of the event fields' embeddings.
    """

    def __init__(
        self,
        schema: DatasetSchema,
        d: int,
        max_rows: int = 1_000_000,
        n_dense_tokens: int = 1,
        shared_tables: dict[str, str] | None = None,
        use_sequence: bool = True,
        domain_token: bool = True,
    ):
        super().__init__()
        if max_rows < 1:
            raise ConfigError(f"max_rows must be >= 1, got {max_rows}")
        self.d = d
        self.cat_names = [f.name for f in schema.categorical]
        self.shared = resolve_shared_tables(schema, shared_tables) if use_sequence else {}
        # a table shared with sequence fields holds every id mapped onto it (e.g. ad_id's table
        # also embeds hist_item_id, whose ids run past the ads into content items)
        rows = {f.name: f.cardinality for f in schema.categorical}
        seq_card = {f.name: f.cardinality for f in schema.sequence}
        for seq_field, cat_name in self.shared.items():
            rows[cat_name] = max(rows[cat_name], seq_card[seq_field])
        self.tables = nn.ModuleDict(
            {name: HashedEmbedding(min(n, max_rows), d) for name, n in rows.items()}
        )
        self.seq_names = [f.name for f in schema.sequence] if use_sequence else []
        self.seq_tables = nn.ModuleDict(
            {
                f.name: HashedEmbedding(min(f.cardinality, max_rows), d)
                for f in schema.sequence
                if use_sequence and f.name not in self.shared
            }
        )
        n_dense = len(schema.dense)
        self.n_dense_tokens = n_dense_tokens if n_dense > 0 else 0
        self.dense = nn.Linear(n_dense, n_dense_tokens * d) if self.n_dense_tokens else None
        self.domain = HashedEmbedding(len(schema.domains), d) if domain_token else None

    @property
    def n_tokens(self) -> int:
        return len(self.cat_names) + self.n_dense_tokens + (self.domain is not None)

    def table_for(self, seq_field: str) -> HashedEmbedding:
        # the ModuleDicts hold HashedEmbeddings (typed Module)
        if seq_field in self.shared:
            return cast(HashedEmbedding, self.tables[self.shared[seq_field]])
        return cast(HashedEmbedding, self.seq_tables[seq_field])

    def embedding_tables(self) -> dict[str, nn.Embedding]:
        """Every distinct table by feature or event-field name (a shared table once, under its
        feature's name; the domain table as ``domain``), e.g. for FSDP wrapping."""
        out = cast(dict[str, nn.Embedding],  # HashedEmbeddings (a ModuleDict: Module)
                   {**dict(self.tables.items()), **dict(self.seq_tables.items())})
        return out | ({"domain": self.domain} if self.domain is not None else {})

    def tokens(self, batch: Batch) -> Tensor:
        cat = batch.categorical
        toks = [self.tables[n](cat[:, j]) for j, n in enumerate(self.cat_names)]
        out = torch.stack(toks, dim=1)
        parts = [out]
        if self.dense is not None:
            x = batch.dense
            x = torch.sign(x) * torch.log1p(x.abs())  # symlog: bids and counts are heavy-tailed
            parts.append(self.dense(x).view(x.shape[0], self.n_dense_tokens, self.d))
        if self.domain is not None:
            parts.append(self.domain(batch.domain).unsqueeze(1))
        return torch.cat(parts, dim=1) if len(parts) > 1 else out

    def events(
        self,
        seq_values: dict[str, Tensor],
        index: Tensor | None = None,
        bag_offsets: Tensor | None = None,
    ) -> Tensor:
        """``[N, d]`` event embeddings (sum over event fields); ``index`` selects events first.

        With ``bag_offsets [n_bags + 1]`` (jagged offsets over the selected events) it returns
        the mean event embedding of each bag, ``[n_bags, d]``, through fused embedding bags:
        the same numbers as ``segment_mean(events(...), bag_offsets)`` without an ``[N, d]``
        intermediate, which is what keeps thousands of events per example cheap.
        """
        total: Tensor | None = None
        for name in self.seq_names:
            ids = seq_values[name]
            if index is not None:
                ids = ids.index_select(0, index)
            e = self.table_for(name)(ids, bag_offsets)
            total = e if total is None else total + e
        if total is None:
            raise ConfigError("the dataset schema has no sequence fields; set use_sequence: false")
        return total

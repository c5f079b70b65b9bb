"""Shared plumbing of the built-in students: a small input budget, one place (DESIGN §2.5, §5).

A student sees fewer features than the teacher: a subset of the categorical features (not
``user_id`` by default: a vertical model cannot afford a table per user), one or a few event
fields of only the ``max_seq_len`` most recent events, small embeddings. ``StudentBase`` owns
those tables, the truncation (done here, on the device, because the reader may hand over longer
histories), the representation-feature path and the output head, so each built-in only says
how it mixes its inputs.

Batches carry ``categorical`` columns in the schema's order (as ``DatasetReader`` yields them
without a projection); the student picks its own columns from them. A dataset without sequence
fields (a log without histories) gives a student no history arm by default (``sequence`` None
takes the schema's first field, if any).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.layers import HashedEmbedding, default_shared_tables
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.ops import keep_last, segment_mean


def _subset(kind: str, wanted: list[str], available: list[str]) -> list[str]:
    unknown = [w for w in wanted if w not in available]
    if unknown:
        has = ", ".join(available) if available else f"no {kind}s"
        raise ConfigError(f"unknown {kind} {unknown[0]!r}; the dataset has: {has}")
    if len(set(wanted)) != len(wanted):
        raise ConfigError(f"{kind}s listed twice in {wanted}")
    return list(wanted)


def mlp(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    """``Linear → ReLU`` per entry of ``hidden``; the identity when ``hidden`` is empty."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    return nn.Sequential(*layers)


class StudentBase(nn.Module):
    """Embeddings, truncated history, representation features and the head of a student.

    Subclasses build their trunk, then call :meth:`init_repr` with the width of the tensor the
    representation features are added to and :meth:`init_head` with the trunk's output width;
    their ``forward(batch, features=None)`` returns :meth:`output` of the last hidden layer.
    """

    cat_index: Tensor  # a buffer: the chosen categorical columns

    def __init__(
        self,
        schema: DatasetSchema,
        tasks: list[str] | None = None,
        *,
        features: list[str] | None = None,
        sequence: list[str] | None = None,
        embedding_dim: int = 8,
        max_rows: int = 100_000,
        max_seq_len: int = 20,
        use_dense: bool = True,
        repr_dim: int = 0,
        domain_embedding: bool = True,
    ) -> None:
        super().__init__()
        for name, value, low in [("embedding_dim", embedding_dim, 1), ("max_rows", max_rows, 1),
                                 ("max_seq_len", max_seq_len, 0), ("repr_dim", repr_dim, 0)]:
            if value < low:
                raise ConfigError(f"{type(self).__name__}: {name} must be >= {low}, got {value}")
        cat_names = [f.name for f in schema.categorical]
        seq_names = [f.name for f in schema.sequence]
        self.tasks = _subset("task", list(schema.tasks if tasks is None else tasks), schema.tasks)
        if not self.tasks:
            raise ConfigError(f"{type(self).__name__}: needs at least one task")
        self.features = _subset(
            "categorical feature",
            [n for n in cat_names if n != "user_id"] if features is None else list(features),
            cat_names,
        )
        self.sequence = _subset(
            "sequence field", seq_names[:1] if sequence is None else list(sequence), seq_names
        )
        self.embedding_dim, self.max_seq_len, self.repr_dim = embedding_dim, max_seq_len, repr_dim
        self.n_schema_cat, self.n_schema_dense = len(cat_names), len(schema.dense)
        self.n_dense = len(schema.dense) if use_dense else 0
        self.cat_cols = [cat_names.index(n) for n in self.features]  # host ints: no sync
        self.register_buffer("cat_index", torch.tensor(self.cat_cols), persistent=False)

        card = {f.name: f.cardinality for f in [*schema.categorical, *schema.sequence]}
        # a shared table must hold both id ranges (e.g. ad ids and organic content ids)
        self.shared = default_shared_tables(self.sequence, self.features)
        rows = {n: card[n] for n in self.features}
        for s, c in self.shared.items():
            rows[c] = max(rows[c], card[s])
        d = embedding_dim
        self.tables = nn.ModuleDict(
            {n: HashedEmbedding(min(rows[n], max_rows), d) for n in self.features}
        )
        self.seq_tables = nn.ModuleDict(
            {n: HashedEmbedding(min(card[n], max_rows), d)
             for n in self.sequence if n not in self.shared}
        )
        self.domain_table = HashedEmbedding(len(schema.domains), d) if domain_embedding else None
        self.repr_norm = nn.LayerNorm(repr_dim) if repr_dim else None
        self.repr_proj: nn.Linear | None = None
        self.head: nn.Linear | None = None

    def embedding_tables(self) -> dict[str, nn.Embedding]:
        """Feature or event-field name → its table (a shared table under its feature's name):
        what parameter sharing copies a teacher's tables into."""
        tables = {**dict(self.tables.items()), **dict(self.seq_tables.items())}
        return cast(dict[str, nn.Embedding], tables)  # HashedEmbeddings (a ModuleDict: Module)

    # ---- building blocks for subclasses ----------------------------------------------------
    @property
    def input_dim(self) -> int:
        """Width of :meth:`flat_input`: features, domain, mean-pooled history, dense."""
        d = self.embedding_dim
        return (len(self.features) * d + (d if self.domain_table is not None else 0)
                + (d if self.sequence else 0) + self.n_dense)

    def init_repr(self, width: int) -> None:
        """Build the representation-feature path into a tensor of ``width``: LayerNorm, then a
        Linear with zero weight and bias, so at init the output ignores the features."""
        if self.repr_dim:
            self.repr_proj = nn.Linear(self.repr_dim, width)
            nn.init.zeros_(self.repr_proj.weight)
            nn.init.zeros_(self.repr_proj.bias)

    def init_head(self, width: int) -> None:
        """One logit per task from the last hidden layer."""
        self.head = nn.Linear(width, len(self.tasks))

    @torch.no_grad()
    def init_output_bias(self, logit: Tensor) -> None:
        """Start the serving head at ``logit [n_tasks]`` (the training base rate's logit): on a
        short stream a 1 % task would otherwise spend its first hundreds of steps calibrating."""
        if self.head is not None:
            self.head.bias.copy_(logit.to(self.head.bias))

    def check_batch(self, batch: Batch) -> None:
        """Shape checks only (no device sync), so a misfed batch fails with a readable error."""
        name = type(self).__name__
        if batch.categorical.shape[1] != self.n_schema_cat:
            raise ValueError(
                f"{name}: batch.categorical has {batch.categorical.shape[1]} columns, expected "
                f"{self.n_schema_cat} (every categorical feature of the schema, in its order)"
            )
        if self.n_dense and batch.dense.shape[1] != self.n_schema_dense:
            raise ValueError(f"{name}: batch.dense has {batch.dense.shape[1]} columns, "
                             f"expected {self.n_schema_dense}")
        missing = [s for s in self.sequence if s not in batch.seq_values]
        if missing:
            raise ValueError(f"{name}: batch has no sequence field {missing[0]!r}")

    def embed_categorical(self, batch: Batch) -> Tensor:
        """``[B, n_features, d]``, one embedding per chosen categorical feature."""
        if not self.features:
            return batch.dense.new_zeros(batch.categorical.shape[0], 0, self.embedding_dim)
        cols = batch.categorical.index_select(1, self.cat_index)
        return torch.stack([t(cols[:, j]) for j, t in enumerate(self.tables.values())], dim=1)

    def embed_feature(self, batch: Batch, name: str) -> Tensor:
        """``[B, d]`` embedding of one chosen categorical feature (e.g. the candidate ad)."""
        return self.tables[name](batch.categorical[:, self.cat_cols[self.features.index(name)]])

    def dense_input(self, batch: Batch) -> Tensor:
        """``[B, n_dense]``, symlog-squashed: bids and counts are heavy-tailed."""
        x = batch.dense
        return torch.sign(x) * torch.log1p(x.abs())

    def history(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """``(events [N', d], offsets [B+1])``: the ``max_seq_len`` most recent events of each
        history, each the sum of its event fields' embeddings. A student without sequence
        fields sees every history empty (``N' = 0``), so building blocks that pool it still
        work on a log without histories."""
        if not self.sequence:
            return self._no_history(batch)
        # seq_max_len is a host int: no sync when nothing is too long
        index, offsets, _ = keep_last(batch.seq_offsets, self.max_seq_len, batch.seq_max_len)
        total = self._event_embedding(batch, self.sequence[0], index)
        for name in self.sequence[1:]:
            total = total + self._event_embedding(batch, name, index)
        return total, offsets

    def _event_embedding(self, batch: Batch, name: str, index: Tensor | None) -> Tensor:
        """``[N', d]``: one event field's embeddings (of the ``index`` events, if given)."""
        ids = batch.seq_values[name]
        if index is not None:
            ids = ids.index_select(0, index)
        table = self.tables[self.shared[name]] if name in self.shared else self.seq_tables[name]
        return table(ids)

    def _no_history(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """No events and all-zero offsets ``[B+1]``: the batch's own may count events of
        fields this student does not read."""
        b = batch.categorical.shape[0]
        events = batch.dense.new_zeros(0, self.embedding_dim)
        return events, torch.zeros(b + 1, dtype=torch.long, device=batch.categorical.device)

    def flat_input(self, batch: Batch, history: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``[B, input_dim]``: concatenated feature embeddings, domain embedding, mean-pooled
        history (``history`` if already computed) and dense features."""
        self.check_batch(batch)
        parts = [self.embed_categorical(batch).flatten(1)]
        if self.domain_table is not None:
            parts.append(self.domain_table(batch.domain))
        if self.sequence:
            events, offsets = history if history is not None else self.history(batch)
            parts.append(segment_mean(events, offsets))
        if self.n_dense:
            parts.append(self.dense_input(batch))
        return torch.cat(parts, dim=1)

    def add_repr(self, x: Tensor, features: Tensor | None) -> Tensor:
        """``x + proj(LayerNorm(features))``; ``x`` unchanged when no features are given."""
        if features is None:
            return x
        name = type(self).__name__
        if self.repr_proj is None or self.repr_norm is None:
            raise ValueError(f"{name}: representation features given but repr_dim is 0 "
                             "(set init_args.repr_dim to their width)")
        if features.dim() != 2 or features.shape[1] != self.repr_dim:
            raise ValueError(f"{name}: representation features have shape "
                             f"{tuple(features.shape)}, expected [B, {self.repr_dim}]")
        if features.shape[0] != x.shape[0]:
            raise ValueError(f"{name}: {features.shape[0]} rows of representation features "
                             f"for a batch of {x.shape[0]}")
        return x + self.repr_proj(self.repr_norm(features.to(x.dtype)))

    def output(self, embedding: Tensor) -> StudentOutput:
        """Logits ``[B, n_tasks]`` (columns in ``self.tasks`` order) and the embedding."""
        if self.head is None:
            raise RuntimeError(f"{type(self).__name__}: call init_head() in __init__")
        return StudentOutput(logits=self.head(embedding), embedding=embedding)

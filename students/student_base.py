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

from collections.abc import Mapping, Sequence
from typing import cast

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.layers import HashedEmbedding, default_shared_tables
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.ops import keep_last, segment_mean
from gemkd.transfer.packs import stacked


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

    # ---- the same blocks for K stacked copies (a pack: forward_stacked) -----------------
    # ``p`` maps this module's parameter names to ``[K, ...]`` tensors; activations are
    # ``[K, B, ...]`` and each member's slice is computed as its own (gemkd.transfer.packs.
    # stacked). A subclass's ``forward_stacked`` mirrors its ``forward`` with them.
    def _stacked_lookup(self, p: Mapping[str, Tensor], key: str, table: nn.Embedding,
                        ids: Tensor) -> Tensor:
        """``[K, ..., d]``: the hashed rows ``ids`` of every member's copy of ``table``."""
        return stacked.lookup(torch.remainder(ids, table.num_embeddings), p[f"{key}.weight"],
                              table.sparse)

    def _stacked_seq_table(self, name: str) -> tuple[str, nn.Embedding]:
        """The parameter prefix and table of sequence field ``name`` (a shared one's
        feature table)."""
        if name in self.shared:
            return (f"tables.{self.shared[name]}",
                    cast(nn.Embedding, self.tables[self.shared[name]]))
        return f"seq_tables.{name}", cast(nn.Embedding, self.seq_tables[name])

    def stacked_embed_feature(self, p: Mapping[str, Tensor], batch: Batch, name: str) -> Tensor:
        """``[K, B, d]``: :meth:`embed_feature` for every member."""
        col = batch.categorical[:, self.cat_cols[self.features.index(name)]]
        return self._stacked_lookup(p, f"tables.{name}", cast(nn.Embedding, self.tables[name]),
                                    col)

    def stacked_history(self, p: Mapping[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
        """``(events [K, N', d], offsets [B+1])``: :meth:`history` for every member."""
        if not self.sequence:
            events, offsets = self._no_history(batch)
            k = next(iter(p.values())).shape[0]
            return events.unsqueeze(0).expand(k, *events.shape), offsets
        index, offsets, _ = keep_last(batch.seq_offsets, self.max_seq_len, batch.seq_max_len)
        total: Tensor | None = None
        for name in self.sequence:
            ids = batch.seq_values[name]
            if index is not None:
                ids = ids.index_select(0, index)
            rows = self._stacked_lookup(p, *self._stacked_seq_table(name), ids)
            total = rows if total is None else total + rows
        assert total is not None
        return total, offsets

    def _stacked_embeddings(self, p: Mapping[str, Tensor], batch: Batch,
                            pool_history: bool) -> tuple[list[Tensor], Tensor | None]:
        """Every chosen feature's rows ``[K, B, d]`` (in ``self.tables`` order) and, with
        ``pool_history``, the mean-pooled history ``[K, B, d]``. A table's uses go through one
        embedding bag (a feature's id a bag of one beside the history's bags of a field that
        shares the table), so its gradient is one tensor, written once: the tables are most of
        the step's memory traffic at K members."""
        b = batch.categorical.shape[0]
        history: dict[str, Tensor] = {}
        offsets = batch.seq_offsets
        if pool_history and self.sequence:
            index, offsets, _ = keep_last(batch.seq_offsets, self.max_seq_len,
                                          batch.seq_max_len)
            for name in self.sequence:
                ids = batch.seq_values[name]
                history[name] = ids if index is None else ids.index_select(0, index)
        pooled: dict[str, Tensor] = {}
        rows: dict[str, Tensor] = {}
        single: dict[str, Tensor] = {}  # looked up together, in one autograd node
        cols = batch.categorical.index_select(1, self.cat_index) if self.features else None
        for j, name in enumerate(self.tables):
            assert cols is not None
            table = cast(nn.Embedding, self.tables[name])
            ids = torch.remainder(cols[:, j], table.num_embeddings)
            fields = [f for f in history if self.shared.get(f) == name]
            if not fields:
                single[name] = ids
                continue
            bag_ids, bag_offsets, start = [ids], [torch.arange(b + 1, device=ids.device)], b
            for f in fields:
                bag_ids.append(torch.remainder(history[f], table.num_embeddings))
                bag_offsets.append(offsets[1:] + start)
                start += history[f].shape[0]
            out = stacked.bag_mean(torch.cat(bag_ids), p[f"tables.{name}.weight"],
                                   torch.cat(bag_offsets), table.sparse)
            rows[name] = out[:, :b]
            for i, f in enumerate(fields):
                pooled[f] = out[:, b * (i + 1):b * (i + 2)]
        found = stacked.lookups(list(single.values()),
                                [p[f"tables.{name}.weight"] for name in single],
                                any(cast(nn.Embedding, self.tables[n]).sparse for n in single))
        rows.update(zip(single, found, strict=True))
        for f in history:
            if f not in pooled:
                key, table = self._stacked_seq_table(f)
                pooled[f] = stacked.bag_mean(torch.remainder(history[f], table.num_embeddings),
                                             p[f"{key}.weight"], offsets, table.sparse)
        total: Tensor | None = None
        for f in self.sequence if pool_history else []:
            total = pooled[f] if total is None else total + pooled[f]
        return [rows[name] for name in self.tables], total

    def stacked_flat_input(self, p: Mapping[str, Tensor], batch: Batch,
                           history: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``[K, B, input_dim]``: :meth:`flat_input` for every member."""
        self.check_batch(batch)
        k = next(iter(p.values())).shape[0]
        b = batch.categorical.shape[0]
        parts = []
        rows, pooled = self._stacked_embeddings(p, batch, pool_history=history is None)
        if rows:
            parts.append(torch.cat(rows, dim=2))
        if self.domain_table is not None:
            parts.append(self._stacked_lookup(p, "domain_table", self.domain_table,
                                              batch.domain))
        if self.sequence:
            if history is not None:
                pooled = stacked.segment_mean(*history)
            assert pooled is not None
            parts.append(pooled)
        if self.n_dense:
            dense = self.dense_input(batch)  # no parameters: every member's
            parts.append(dense.unsqueeze(0).expand(k, *dense.shape))
        if not parts:
            return batch.dense.new_zeros(k, b, 0)
        return torch.cat(parts, dim=2)

    def stacked_add_repr(self, p: Mapping[str, Tensor], x: Tensor,
                         features: Tensor | None) -> Tensor:
        """:meth:`add_repr` for every member (``features`` ``[B, F]`` or ``[K, B, F]``)."""
        if features is None:
            return x
        if self.repr_proj is None or self.repr_norm is None:
            raise ValueError(f"{type(self).__name__}: representation features given but "
                             "repr_dim is 0 (set init_args.repr_dim to their width)")
        if features.shape[-1] != self.repr_dim or features.shape[-2] != x.shape[1]:
            raise ValueError(f"{type(self).__name__}: representation features have shape "
                             f"{tuple(features.shape)}, expected [..., {x.shape[1]}, "
                             f"{self.repr_dim}]")
        normed = stacked.layer_norm(features.to(x.dtype), p["repr_norm.weight"],
                                    p["repr_norm.bias"], self.repr_norm.eps)
        return x + stacked.linear(normed, p["repr_proj.weight"], p["repr_proj.bias"])

    def stacked_output(self, p: Mapping[str, Tensor], embedding: Tensor) -> StudentOutput:
        """:meth:`output` for every member: logits ``[K, B, n_tasks]``."""
        if self.head is None:
            raise RuntimeError(f"{type(self).__name__}: call init_head() in __init__")
        return StudentOutput(logits=stacked.linear(embedding, p["head.weight"], p["head.bias"]),
                             embedding=embedding)

"""Tiny inputs for checking a model or a transfer method of your own in a few lines, without a
dataset on disk: a small :class:`~gemkd.transfer.data.schema.DatasetSchema`, random jagged
:class:`~gemkd.transfer.data.batch.Batch`\\ es shaped like the reader's (heavy-tailed histories,
some empty, one very long), and a random stand-in for a run's teacher. The plug-in guides
(docs/guides/custom_student.md, docs/guides/custom_method.md, docs/guides/custom_teacher.md)
check their examples with them, and gemkd's own tests use them.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema, Feature
from gemkd.transfer.methods.base import TeacherTargets

CATEGORICAL = [
    ("user_id", 1000),
    ("ad_id", 300),
    ("advertiser_id", 50),
    ("ad_category", 20),
    ("age_bucket", 8),
    ("country", 12),
    ("device", 4),
    ("ad_format", 5),
]
SEQUENCE = [("hist_item_id", 300), ("hist_category", 20), ("hist_action", 4), ("hist_age", 16)]
DENSE = ["bid"] + [f"creative_{i}" for i in range(8)]
TASKS = ["click", "conversion", "engage"]
DOMAINS = ["feed", "stories", "messaging"]


def tiny_schema(max_history: int = 4096) -> DatasetSchema:
    """The synthetic world's layout in miniature: 8 categorical features (``user_id`` first), 4
    event fields, 9 dense features, tasks click/conversion/engage, domains feed/stories/messaging,
    small cardinalities."""
    return DatasetSchema(
        source="test",
        categorical=[Feature(n, c) for n, c in CATEGORICAL],
        dense=list(DENSE),
        sequence=[Feature(n, c) for n, c in SEQUENCE],
        tasks=list(TASKS),
        domains=list(DOMAINS),
        days=[0],
        max_history=max_history,
    )


def heavy_tailed_lengths(b: int, gen: torch.Generator, long_len: int = 3000) -> torch.Tensor:
    """Mostly short (log-normal), about a fifth empty, and one history of ``long_len``: the
    cases a model's jagged code must get right (empty rows, truncation of a long one)."""
    lengths = torch.exp(torch.randn(b, generator=gen) * 1.2 + 2.0).long()
    lengths[torch.rand(b, generator=gen) < 0.2] = 0
    if b > 1:
        lengths[1] = long_len
    return lengths


def batch_from_lengths(schema: DatasetSchema, lengths: torch.Tensor, seed: int = 0) -> Batch:
    """A random batch over ``schema`` whose row ``b`` has ``lengths[b]`` history events: ids
    within each feature's cardinality, ~30 % positive labels for every task of the schema,
    domains cycling, ``user_id`` the ``user_id`` column (else the first), day 0, ``ts`` the row."""
    gen = torch.Generator().manual_seed(seed)
    b = lengths.shape[0]
    n = int(lengths.sum())
    offsets = torch.zeros(b + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lengths, 0)
    cat = torch.stack(
        [torch.randint(0, f.cardinality, (b,), generator=gen) for f in schema.categorical], 1
    )
    seq = {f.name: torch.randint(0, f.cardinality, (n,), generator=gen) for f in schema.sequence}
    names = [f.name for f in schema.categorical]
    user_col = names.index("user_id") if "user_id" in names else 0
    return Batch(
        dense=torch.randn(b, len(schema.dense), generator=gen) * 2,
        categorical=cat,
        seq_values=seq,
        seq_offsets=offsets,
        seq_max_len=int(lengths.max()) if b else 0,
        labels=(torch.rand(b, len(schema.tasks), generator=gen) < 0.3).float(),
        domain=torch.arange(b) % len(schema.domains),
        example_id=torch.arange(b),
        user_id=cat[:, user_col].clone(),
        day=torch.zeros(b, dtype=torch.long),
        ts=torch.arange(b),
    )


def random_batch(schema: DatasetSchema, b: int = 64, seed: int = 0,
                 long_len: int = 3000) -> Batch:
    """``b`` random rows over ``schema`` with heavy-tailed histories (row 1 has ``long_len``
    events), reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed + 1000)
    return batch_from_lengths(schema, heavy_tailed_lengths(b, gen, long_len), seed)


def select(batch: Batch, rows: list[int]) -> Batch:
    """The sub-batch of ``rows`` (jagged sequences re-packed), ``seq_max_len`` recomputed: a
    model's output for a row must not depend on which other rows share its batch."""
    idx = torch.tensor(rows, dtype=torch.long)
    starts, ends = batch.seq_offsets[:-1][idx], batch.seq_offsets[1:][idx]
    pieces = [torch.arange(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]
    ev = torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)
    lengths = ends - starts
    offsets = torch.zeros(len(rows) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lengths, 0)
    return replace(
        batch,
        dense=batch.dense[idx],
        categorical=batch.categorical[idx],
        seq_values={k: v[ev] for k, v in batch.seq_values.items()},
        seq_offsets=offsets,
        seq_max_len=int(lengths.max()) if rows else 0,
        labels=batch.labels[idx],
        domain=batch.domain[idx],
        example_id=batch.example_id[idx],
        user_id=batch.user_id[idx],
        day=batch.day[idx],
        ts=batch.ts[idx],
    )


class RandomTeacher:
    """Stands in for a run's teacher (a :class:`gemkd.transfer.distill.StoreTeacher`) when checking
    a transfer method: ``batch -> TeacherTargets`` with random logits ``[B, n_tasks]``, ``found``
    true for about a ``coverage`` share of rows (the others hold zeros, as a store join's missing
    rows do) and, with ``emb_dim > 0``, a random representation ``[B, emb_dim]``. Like a
    ``StoreTeacher`` it has ``emb_dim`` (0: no representation)."""

    def __init__(self, n_tasks: int, emb_dim: int = 0, coverage: float = 1.0,
                 seed: int = 0) -> None:
        if n_tasks < 1 or emb_dim < 0 or not 0.0 <= coverage <= 1.0:
            raise ValueError(f"need n_tasks >= 1, emb_dim >= 0 and coverage in [0, 1]; got "
                             f"{n_tasks}, {emb_dim}, {coverage}")
        self.n_tasks, self.emb_dim, self.coverage = n_tasks, emb_dim, coverage
        self._gen = torch.Generator().manual_seed(seed)

    def __call__(self, batch: Batch) -> TeacherTargets:
        b = len(batch)
        found = torch.rand(b, generator=self._gen) < self.coverage
        logits = torch.randn(b, self.n_tasks, generator=self._gen) * found.unsqueeze(1)
        emb = (torch.randn(b, self.emb_dim, generator=self._gen) * found.unsqueeze(1)
               if self.emb_dim else None)
        return TeacherTargets(logits, found, emb)

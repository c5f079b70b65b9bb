"""A tiny DatasetSchema and random jagged Batches for the teacher tests."""

from __future__ import annotations

from dataclasses import replace

import torch

from transfer.data.batch import Batch
from transfer.data.schema import DatasetSchema, Feature

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

TINY = {  # hyper-parameters for fast unit tests
    "d": 8,
    "n_layers": 2,
    "n_F": 3,
    "n_L": 3,
    "k": 4,
    "mlp_width": 32,
    "n_heads": 2,
    "n_cls": 2,
    "n_xsum": 2,
    "n_pma": 2,
    "n_recent": 3,
    "pyramid_recent": 8,
    "pyramid_chunk": 4,
    "trunk_dim": 16,
    "head_hidden": 8,
}


def tiny_schema(max_history: int = 4096) -> DatasetSchema:
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
    """Mostly short (log-normal), about a fifth empty, and one history of ``long_len``."""
    lengths = torch.exp(torch.randn(b, generator=gen) * 1.2 + 2.0).long()
    lengths[torch.rand(b, generator=gen) < 0.2] = 0
    if b > 1:
        lengths[1] = long_len
    return lengths


def batch_from_lengths(schema: DatasetSchema, lengths: torch.Tensor, seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    b = lengths.shape[0]
    n = int(lengths.sum())
    offsets = torch.zeros(b + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lengths, 0)
    cat = torch.stack(
        [torch.randint(0, f.cardinality, (b,), generator=gen) for f in schema.categorical], 1
    )
    seq = {f.name: torch.randint(0, f.cardinality, (n,), generator=gen) for f in schema.sequence}
    return Batch(
        dense=torch.randn(b, len(schema.dense), generator=gen) * 2,
        categorical=cat,
        seq_values=seq,
        seq_offsets=offsets,
        seq_max_len=int(lengths.max()) if b else 0,
        labels=(torch.rand(b, len(schema.tasks), generator=gen) < 0.3).float(),
        domain=torch.arange(b) % len(schema.domains),
        example_id=torch.arange(b),
        user_id=cat[:, 0].clone(),
        day=torch.zeros(b, dtype=torch.long),
        ts=torch.arange(b),
    )


def random_batch(schema: DatasetSchema, b: int = 64, seed: int = 0, long_len: int = 3000) -> Batch:
    gen = torch.Generator().manual_seed(seed + 1000)
    return batch_from_lengths(schema, heavy_tailed_lengths(b, gen, long_len), seed)


def select(batch: Batch, rows: list[int]) -> Batch:
    """The sub-batch of ``rows`` (jagged sequences re-packed), ``seq_max_len`` recomputed."""
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

"""A log without histories in miniature: :func:`~gemkd.transfer.testing.tiny_schema` without
sequence fields and batches without events, as ``gemkd data import`` writes and the reader yields
them for a mapping with no ``history`` (kept here, beside the shared helpers, for the teacher and
student tests of that case)."""

from __future__ import annotations

from dataclasses import replace

import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.testing import batch_from_lengths, tiny_schema


def history_less_schema() -> DatasetSchema:
    """The tiny schema with no sequence fields and ``max_history`` 0 (what the importer writes)."""
    return replace(tiny_schema(), sequence=[], max_history=0)


def history_less_batch(schema: DatasetSchema, b: int = 64, seed: int = 0) -> Batch:
    """``b`` random rows with no events: no ``seq_values``, all-zero offsets, ``seq_max_len`` 0."""
    if schema.sequence:
        raise ValueError("history_less_batch: the schema has sequence fields")
    return batch_from_lengths(schema, torch.zeros(b, dtype=torch.long), seed)

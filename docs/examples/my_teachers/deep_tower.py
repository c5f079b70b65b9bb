"""A user's own teacher: every categorical feature embedded, the history mean-pooled, one deep MLP
over their concatenation. It satisfies gemkd's teacher contract (gemkd.transfer.models), so `teacher
fit`, `teacher export`, the store, LoopFM codes and every transfer method use it as they use GEM.
"""

from __future__ import annotations

import torch
from torch import nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.layers import HashedEmbedding
from gemkd.transfer.models import TeacherOutput
from gemkd.transfer.ops import segment_mean


class DeepTower(nn.Module):
    """``DeepTower(schema, dim=16, hidden=[128, 64], max_rows=100000)``.

    Returns ``TeacherOutput(logits [B, len(schema.tasks)], repr={"tower": [B, hidden[-1]]})``:
    one logit per task of the dataset, in schema order, and one named representation an export
    can store (``repr_layer: tower`` in the teacher config)."""

    def __init__(self, schema: DatasetSchema, dim: int = 16, hidden: list[int] | None = None,
                 max_rows: int = 100_000) -> None:
        super().__init__()
        hidden = [128, 64] if hidden is None else list(hidden)
        if dim < 1 or not hidden or min(hidden) < 1:
            raise ValueError(f"dim and every hidden width must be >= 1, got {dim}, {hidden}")
        self.tables = nn.ModuleList(HashedEmbedding(min(f.cardinality, max_rows), dim)
                                    for f in schema.categorical)
        self.item = schema.sequence[0].name if schema.sequence else None
        self.history = (HashedEmbedding(min(schema.sequence[0].cardinality, max_rows), dim)
                        if self.item else None)
        width = dim * (len(self.tables) + (self.item is not None)) + len(schema.dense)
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(width, len(schema.tasks))
        self.out_dim = width

    def representation_dims(self) -> dict[str, int]:
        return {"tower": self.out_dim}

    def forward(self, batch: Batch) -> TeacherOutput:
        parts = [t(batch.categorical[:, j]) for j, t in enumerate(self.tables)]
        if self.history is not None:
            parts.append(segment_mean(self.history(batch.seq_values[self.item]),
                                      batch.seq_offsets))
        if batch.dense.shape[1]:
            x = batch.dense
            parts.append(torch.sign(x) * torch.log1p(x.abs()))
        tower = self.mlp(torch.cat(parts, dim=1))
        return TeacherOutput(logits=self.head(tower).float(), repr={"tower": tower})

"""``DCNStudent``: explicit feature crosses (DCNv2) beside a deep MLP.

A small student cannot afford the teacher's interaction arms; full-rank cross layers give it
bounded-degree feature crosses for ``O(D²)`` parameters per layer (Wang et al., 2021).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from gemkd.students.student_base import StudentBase, mlp
from gemkd.students.student_registry import BUILTIN_STUDENTS
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import StudentOutput


class CrossLayer(nn.Module):
    """``x_{l+1} = x0 ⊙ (W x_l + b) + x_l`` with a full-rank ``W``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x0: Tensor, x: Tensor) -> Tensor:
        return x0 * self.linear(x) + x


@BUILTIN_STUDENTS.register("dcn")
class DCNStudent(StudentBase):
    """The flat input (feature embeddings, domain, mean-pooled history, dense; plus the
    representation features' projection) feeds ``n_cross`` cross layers and, in parallel, an MLP
    of widths ``hidden``; their outputs, concatenated, are the embedding ``[B, D + hidden[-1]]``
    the head reads. Other arguments: see :class:`StudentBase`.
    """

    def __init__(
        self,
        schema: DatasetSchema,
        tasks: list[str] | None = None,
        *,
        n_cross: int = 2,
        hidden: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(schema, tasks, **kwargs)
        self.hidden = [64, 32] if hidden is None else list(hidden)
        if n_cross < 1:
            raise ConfigError(f"DCNStudent: n_cross must be >= 1, got {n_cross}")
        if not self.hidden or min(self.hidden) < 1:
            raise ConfigError(f"DCNStudent: hidden must be a non-empty list of widths >= 1, "
                              f"got {hidden}")
        d0 = self.input_dim
        self.init_repr(d0)
        self.cross = nn.ModuleList(CrossLayer(d0) for _ in range(n_cross))
        self.deep: nn.Sequential = mlp(d0, self.hidden)
        self.init_head(d0 + self.hidden[-1])

    def forward(self, batch: Batch, features: Tensor | None = None) -> StudentOutput:
        x0 = self.add_repr(self.flat_input(batch), features)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.output(torch.cat([x, self.deep(x0)], dim=1))

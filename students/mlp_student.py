"""``MLPStudent``: the plainest vertical model, and the baseline the other students beat."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from gemkd.students.student_base import StudentBase, mlp
from gemkd.students.student_registry import BUILTIN_STUDENTS
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import StudentOutput


@BUILTIN_STUDENTS.register("mlp")
class MLPStudent(StudentBase):
    """Feature embeddings + mean-pooled recent history + dense features → MLP → one logit per
    task. Representation features are added to the MLP's input.

    ``hidden`` lists the MLP's layer widths (default ``[64, 32]``); the last one is the
    embedding returned for an auxiliary head. Other arguments: see :class:`StudentBase`.
    """

    def __init__(
        self,
        schema: DatasetSchema,
        tasks: list[str] | None = None,
        *,
        hidden: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(schema, tasks, **kwargs)
        self.hidden = [64, 32] if hidden is None else list(hidden)
        if not self.hidden or min(self.hidden) < 1:
            raise ConfigError(f"MLPStudent: hidden must be a non-empty list of widths >= 1, "
                              f"got {hidden}")
        self.init_repr(self.input_dim)
        self.mlp: nn.Sequential = mlp(self.input_dim, self.hidden)
        self.init_head(self.hidden[-1])

    def forward(self, batch: Batch, features: Tensor | None = None) -> StudentOutput:
        x = self.add_repr(self.flat_input(batch), features)
        return self.output(self.mlp(x))

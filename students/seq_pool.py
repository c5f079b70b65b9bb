"""``SeqPoolStudent``: history pooled by target attention on the candidate ad (DIN-style).

A mean of the recent events says what the user did; attention with the candidate ad as the
query says which of it matters for *this* ad — the cheapest sequence signal a student can use.
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
from gemkd.transfer.ops import jagged_target_attention


@BUILTIN_STUDENTS.register("seq_pool")
class SeqPoolStudent(StudentBase):
    """The flat input (feature embeddings, domain, mean-pooled history, dense) plus the history
    pooled by target attention, with the ``query_feature`` embedding (the candidate ad) as the
    query, → MLP of widths ``hidden`` → one logit per task. The query passes through a linear
    map initialised to the identity: history item ids share the ad-id table, so attention starts
    as plain similarity in one space. Representation features are added to the MLP's input.
    Other arguments: see :class:`StudentBase`.
    """

    def __init__(
        self,
        schema: DatasetSchema,
        tasks: list[str] | None = None,
        *,
        hidden: list[int] | None = None,
        query_feature: str = "ad_id",
        **kwargs: Any,
    ) -> None:
        super().__init__(schema, tasks, **kwargs)
        self.hidden = [64, 32] if hidden is None else list(hidden)
        if not self.hidden or min(self.hidden) < 1:
            raise ConfigError(f"SeqPoolStudent: hidden must be a non-empty list of widths >= 1, "
                              f"got {hidden}")
        if query_feature not in self.features:
            raise ConfigError(f"SeqPoolStudent: query_feature {query_feature!r} is not among "
                              f"the student's features {self.features}")
        if not self.sequence:
            raise ConfigError(self._no_sequence_message(schema))
        self.query_feature = query_feature
        d = self.embedding_dim
        self.query = nn.Linear(d, d)
        with torch.no_grad():
            self.query.weight.copy_(torch.eye(d))
            self.query.bias.zero_()
        width = self.input_dim + d
        self.init_repr(width)
        self.mlp: nn.Sequential = mlp(width, self.hidden)
        self.init_head(self.hidden[-1])

    @staticmethod
    def _no_sequence_message(schema: DatasetSchema) -> str:
        """Its whole point is the history: say why there is none and what to use instead."""
        if not schema.sequence:
            return ("SeqPoolStudent pools the history, but the dataset has no sequence fields "
                    "(no history): use the mlp or dcn student (class_path: mlp | dcn)")
        return ("SeqPoolStudent: needs at least one sequence field (init_args.sequence is "
                f"empty; the dataset has: {', '.join(f.name for f in schema.sequence)})")

    def forward(self, batch: Batch, features: Tensor | None = None) -> StudentOutput:
        self.check_batch(batch)
        events, offsets = self.history(batch)
        q = self.query(self.embed_feature(batch, self.query_feature))
        attended = jagged_target_attention(q, events, events, offsets)
        x = torch.cat([self.flat_input(batch, (events, offsets)), attended], dim=1)
        return self.output(self.mlp(self.add_repr(x, features)))

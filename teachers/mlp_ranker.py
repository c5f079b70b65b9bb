"""The baseline ranker: GEM's inputs, concatenated into a plain 2-hidden-layer MLP.

The same features as :class:`~gemkd.teachers.gem.GEM` (hashed tables per categorical feature, the
history as the mean of its event embeddings in tables shared with the candidate's, symlog dense
features projected to tokens, a domain token), built by the same
:class:`~gemkd.teachers.gem.embeddings.FeatureEmbeddings`, but no feature interaction beyond what an
MLP over their concatenation learns: ``concat → Linear → GELU → Linear → GELU → Linear(T)``.
It is the "is the teacher's architecture worth it?" reference of the ablation benchmark.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from gemkd.teachers.configurable import ConfigurableTeacher, resolve_use_sequence
from gemkd.teachers.gem.embeddings import FeatureEmbeddings, HashedEmbedding
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import TeacherOutput
from gemkd.transfer.ops import keep_last


class MLPRanker(ConfigurableTeacher):
    """A 2-hidden-layer MLP over GEM's embedded features, one logit per task.

    ``forward(batch)`` returns a :class:`~gemkd.transfer.models.TeacherOutput`: ``logits [B,
    n_tasks]`` float32 and ``repr {"trunk": [B, hidden]}`` (the second hidden layer).

    Hyper-parameters (all keyword): ``d`` embedding width; ``hidden`` width of both hidden
    layers; ``max_history`` (most recent events pooled; None = the schema's); ``max_rows``
    (embedding rows cap, ids hashed); ``n_dense_tokens``; ``domain_token`` (embed the domain
    id); ``use_sequence`` (pool the history at all; None = iff the dataset has sequence
    fields, and a history-less dataset drops the pooled history even when true, ``max_history``
    then unused); ``shared_tables`` (as in GEM);
    ``dropout`` (after each hidden layer).
    """

    def __init__(
        self,
        schema: DatasetSchema,
        *,
        d: int = 32,
        hidden: int = 256,
        max_history: int | None = None,
        max_rows: int = 1_000_000,
        n_dense_tokens: int = 1,
        domain_token: bool = True,
        use_sequence: bool | None = None,
        shared_tables: dict[str, str] | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.config: dict[str, Any] = {
            k_: v for k_, v in locals().items() if k_ not in ("self", "schema", "__class__")
        }
        use_sequence = resolve_use_sequence(type(self).__name__, use_sequence, schema)
        self.config["use_sequence"] = use_sequence
        max_history = schema.max_history if max_history is None else max_history
        self.config["max_history"] = max_history
        if shared_tables is not None:
            self.config["shared_tables"] = dict(shared_tables)
        self._validate(schema)
        self.schema = schema
        self.task_names = list(schema.tasks)
        self.d, self.hidden = d, hidden
        self.use_sequence = use_sequence
        self.max_history = max_history

        self.embeddings = FeatureEmbeddings(
            schema, d, max_rows, n_dense_tokens, shared_tables, use_sequence, domain_token
        )
        in_dim = (self.embeddings.n_tokens + (1 if use_sequence else 0)) * d
        layers: list[nn.Module] = []
        width = in_dim
        for _ in range(2):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = hidden
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(hidden, len(schema.tasks))
        self._repr_dims = {"trunk": hidden}

    def _validate(self, schema: DatasetSchema) -> None:
        c = self.config
        problems = []
        sized = ("d", "hidden", "max_rows") + (("max_history",) if c["use_sequence"] else ())
        for key in sized:
            if not isinstance(c[key], int) or c[key] < 1:
                problems.append(f"{key} must be an integer >= 1, got {c[key]!r}")
        if not isinstance(c["n_dense_tokens"], int) or c["n_dense_tokens"] < 0:
            problems.append(f"n_dense_tokens must be an integer >= 0, got {c['n_dense_tokens']!r}")
        if not schema.tasks or not schema.domains:
            problems.append("the dataset schema needs at least one task and one domain")
        if not 0 <= c["dropout"] < 1:
            problems.append(f"dropout must be in [0, 1), got {c['dropout']!r}")
        if problems:
            raise ConfigError(f"{type(self).__name__}: " + "; ".join(problems))

    # ------------------------------------------------------------------ public API
    @classmethod
    def fsdp_wrap_modules(cls) -> tuple[type[nn.Module], ...]:
        """Module classes to shard as FSDP units: the embedding tables."""
        return (HashedEmbedding,)

    def fsdp_units(self) -> list[nn.Module]:
        """The embedding tables of this model (each shared table once)."""
        return list(self.embeddings.embedding_tables().values())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def pooled_history(self, batch: Batch) -> Tensor:
        """``[B, d]``: the mean event embedding of each (truncated) history, 0 when empty."""
        index, offsets, _ = keep_last(batch.seq_offsets, self.max_history, batch.seq_max_len)
        return self.embeddings.events(batch.seq_values, index, bag_offsets=offsets)

    @torch.no_grad()
    def init_output_bias(self, logit: Tensor) -> None:
        """Start the output at ``logit [n_tasks]`` (the training base rate's logit)."""
        self.out.bias.copy_(logit.to(self.out.bias))

    def forward(self, batch: Batch) -> TeacherOutput:
        x = self.embeddings.tokens(batch).flatten(1)
        if self.use_sequence:
            x = torch.cat([x, self.pooled_history(batch)], dim=1)
        trunk = self.mlp(x)
        logits = self.out(trunk).float()
        return TeacherOutput(logits=logits, repr={"trunk": trunk})

"""The baseline ranker: GEM's inputs, concatenated into a plain 2-hidden-layer MLP.

The same features as :class:`~gemkd.teachers.gem.GEM` (hashed tables per categorical feature, the
history as the mean of its event embeddings in tables shared with the candidate's, symlog dense
features projected to tokens, a domain token), built by the same
:class:`~gemkd.teachers.gem.embeddings.FeatureEmbeddings`, but no feature interaction beyond what an
MLP over their concatenation learns: ``concat → Linear → GELU → Linear → GELU → Linear(T)``.
It is the "is the teacher's architecture worth it?" reference of the ablation benchmark.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gemkd.teachers.configurable import ConfigurableTeacher, built_config
from gemkd.teachers.gem.embeddings import FeatureEmbeddings, HashedEmbedding
from gemkd.teachers.mlp_ranker_config import MLPRankerConfig
from gemkd.teachers.teacher_registry import BUILTIN_TEACHERS
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.models import TeacherOutput
from gemkd.transfer.ops import keep_last


@BUILTIN_TEACHERS.register("mlp")
class MLPRanker(ConfigurableTeacher):
    """A 2-hidden-layer MLP over GEM's embedded features, one logit per task.

    ``forward(batch)`` returns a :class:`~gemkd.transfer.models.TeacherOutput`: ``logits [B,
    n_tasks]`` float32 and ``repr {"trunk": [B, hidden]}`` (the second hidden layer).

    Hyper-parameters: a :class:`~gemkd.teachers.mlp_ranker_config.MLPRankerConfig` or its fields
    as keywords (``d``, ``hidden``, ``max_history``, ``max_rows``, ``n_dense_tokens``,
    ``domain_token``, ``use_sequence``, ``shared_tables``, ``dropout``; each described there).
    """

    #: The hyper-parameters' dataclass: its fields are the ``model:`` keys (:meth:`hparam_names`).
    config_class: ClassVar[type[MLPRankerConfig]] = MLPRankerConfig

    def __init__(self, schema: DatasetSchema, config: MLPRankerConfig | None = None, /,
                 **hparams: Any):
        """``MLPRanker(schema, MLPRankerConfig(...))`` or ``MLPRanker(schema, d=..., ...)``
        (keys checked by :meth:`MLPRankerConfig.from_mapping`); keys given beside a config
        replace its values.

        Raises
        ------
        ConfigError
            Naming the class and the key: an unknown key, a wrong type, a broken rule, or a
            config that is not an :class:`MLPRankerConfig`.
        """
        super().__init__()
        owner = type(self).__name__
        config = built_config(MLPRankerConfig, config, hparams, owner)
        #: the hyper-parameters as built: use_sequence and max_history resolved for the schema
        self.config: MLPRankerConfig = config.resolve(schema, owner)
        c = self.config
        self.schema = schema
        self.task_names = list(schema.tasks)
        self.d, self.hidden = c.d, c.hidden
        self.use_sequence = bool(c.use_sequence)
        assert c.max_history is not None  # MLPRankerConfig.resolve sets the schema's
        self.max_history: int = c.max_history

        self.embeddings = FeatureEmbeddings(
            schema, c.d, c.max_rows, c.n_dense_tokens, c.shared_tables, self.use_sequence,
            c.domain_token
        )
        in_dim = (self.embeddings.n_tokens + (1 if self.use_sequence else 0)) * c.d
        layers: list[nn.Module] = []
        width = in_dim
        for _ in range(2):
            layers += [nn.Linear(width, c.hidden), nn.GELU()]
            if c.dropout > 0:
                layers.append(nn.Dropout(c.dropout))
            width = c.hidden
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(c.hidden, len(schema.tasks))
        self._repr_dims = {"trunk": c.hidden}

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

"""The MLP ranker's hyper-parameters as one typed, frozen dataclass, checked like GEM's.

Why: as a dataclass each of the ranker's keys has one type, one default and one rule (declared
in its annotation, read by :func:`gemkd.transfer.constraints.check_fields`), and a teacher config's
``model:`` mapping is checked by the validator every other config uses
(:func:`gemkd.transfer.config.build_dataclass`: unknown keys and wrong types are errors naming
the key). The keys the ranker shares with GEM carry GEM's rules. What depends on the dataset
(the sequence arm, ``max_history`` from its schema) is resolved by
:meth:`MLPRankerConfig.resolve`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

from gemkd.teachers.configurable import ModelConfig, resolve_use_sequence
from gemkd.teachers.gem.gem_config import Dropout, History, NonNegative, Positive, Tristate
from gemkd.transfer.constraints import check_fields, is_int
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError

C = TypeVar("C", bound="MLPRankerConfig")


@dataclass(frozen=True)
class MLPRankerConfig(ModelConfig):
    """The MLP ranker's hyper-parameters (a teacher config's ``model:`` keys)."""

    OWNER = "MLPRanker"

    d: Positive = 32  # embedding width
    hidden: Positive = 256  # width of both hidden layers (and of the ``trunk`` representation)
    max_history: History | None = None  # most recent events pooled (None: the schema's)
    max_rows: Positive = 1_000_000  # embedding rows cap (ids hashed)
    n_dense_tokens: NonNegative = 1
    domain_token: bool = True  # embed the domain id as a token
    # pool the history at all; None: iff the dataset has sequence fields (a history-less dataset
    # drops the pooled history even when true, max_history then unused)
    use_sequence: Tristate | None = None
    shared_tables: dict[str, str] | None = None  # sequence field → categorical feature's table
    dropout: Dropout = 0.0  # after each hidden layer

    def __post_init__(self) -> None:
        check_fields(self)  # build_dataclass names the source
        if self.shared_tables is not None:  # a copy: the frozen config owns its mapping
            object.__setattr__(self, "shared_tables", dict(self.shared_tables))

    def resolve(self: C, schema: DatasetSchema, owner: str) -> C:
        """This config for ``schema``: ``use_sequence`` and ``max_history`` resolved (see
        :func:`~gemkd.teachers.configurable.resolve_use_sequence`).

        Raises
        ------
        ConfigError
            Naming ``owner``: a schema without tasks or domains, or a ``max_history`` below 1
            where the history is pooled.
        """
        use_sequence = resolve_use_sequence(owner, self.use_sequence, schema)
        max_history = schema.max_history if self.max_history is None else self.max_history
        problems = []
        if not schema.tasks or not schema.domains:
            problems.append("the dataset schema needs at least one task and one domain")
        if use_sequence and (not is_int(max_history) or max_history < 1):
            problems.append(f"max_history must be an integer >= 1, got {max_history!r}")
        if problems:
            raise ConfigError(f"{owner}: " + "; ".join(problems))
        return dataclasses.replace(self, use_sequence=use_sequence, max_history=max_history)

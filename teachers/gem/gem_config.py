"""GEM's hyper-parameters as one typed, frozen dataclass, checked like the spec.

Why: the model takes ~30 keyword arguments; as a dataclass each key has one type, one default
and one rule, a teacher config's ``model:`` mapping is checked by the same validator as every
other config (:func:`gemkd.transfer.config.build_dataclass`: unknown keys, wrong types and
Literal choices are errors naming the key), and the rules that need no dataset live here. What
depends on the dataset (the sequence arm when it has no histories, ``max_history`` from its
schema) is resolved by :meth:`GEMConfig.resolve`. See :class:`gemkd.teachers.gem.gem_model.GEM`
for what each key does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, TypeVar

from gemkd.teachers.configurable import ModelConfig, resolve_use_sequence
from gemkd.transfer.constraints import Rule, check_fields, int_at_least, is_int
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import HeadType, Kernel

C = TypeVar("C", bound="GEMConfig")

#: the rules of GEM's keys (read by gemkd.transfer.constraints.check_fields)
Positive = Annotated[int, int_at_least(1, "{key} must be an integer >= 1, got {value!r}")]
NonNegative = Annotated[int, int_at_least(0, "{key} must be an integer >= 0, got {value!r}")]
Chunk = Annotated[int, int_at_least(2, "pyramid_chunk must be an integer >= 2, got {value!r}")]
Shrink = Annotated[float, Rule(lambda v: isinstance(v, int | float) and v >= 1,
                               "pyramid_shrink must be >= 1, got {value!r}")]
History = Annotated[int, Rule(is_int, "max_history must be an integer or null, got {value!r}")]
Dropout = Annotated[float, Rule(lambda v: isinstance(v, int | float) and 0 <= v < 1,
                                "dropout must be in [0, 1), got {value!r}")]
Tristate = Annotated[bool, Rule(lambda v: v in (True, False), "use_sequence must be true, false "
                                "or null (auto: the sequence arm iff the dataset has sequence "
                                "fields), got {value!r}")]


@dataclass(frozen=True)
class GEMConfig(ModelConfig):
    """GEM's hyper-parameters (a teacher config's ``model:`` keys); defaults are GEM's."""

    OWNER = "GEM"

    d: Positive = 32  # embedding / token width
    n_layers: Positive = 2  # interleaved [cross, Wukong] layers
    n_F: Positive = 8  # Wukong FMB output tokens
    n_L: NonNegative = 8  # Wukong LCB tokens
    k: Positive = 8  # Wukong FM rank
    # Wukong MLP width; also the X-summary MLP and the trunk's first layer
    mlp_width: Positive = 256
    mlp_layers: Positive = 1
    n_heads: Positive = 2  # InterFormer attention heads (d must be divisible by it)
    n_cls: NonNegative = 2  # CLS tokens
    n_xsum: Positive = 2  # X_sum tokens
    n_pma: NonNegative = 2  # PMA seeds
    n_recent: NonNegative = 4  # recent tokens in S_sum (at most pyramid_recent)
    ffn_mult: Positive = 2  # personalised-FFN width multiple
    pyramid_recent: Positive = 16  # R raw events
    pyramid_chunk: Chunk = 4  # c events per chunk
    pyramid_shrink: Shrink = 2.0  # each layer keeps 1/shrink of the tokens below (never < R)
    max_history: History | None = None  # most recent events kept in-model (None: the schema's)
    max_rows: Positive = 1_000_000  # embedding rows cap (ids hashed)
    n_dense_tokens: NonNegative = 1
    trunk_dim: Positive = 128
    head_type: HeadType = "domain_task"
    head_hidden: Positive = 64
    n_experts: Positive = 4  # domain_gated heads' shared experts
    dropout: Dropout = 0.0
    use_wukong: bool = True  # False: the sequence arm only (ablation)
    use_sequence: Tristate | None = None  # None: iff the dataset has sequence fields
    domain_token: bool = True  # embed the domain id as a token
    shared_tables: dict[str, str] | None = None  # sequence field → categorical feature's table
    kernel: Kernel = "auto"  # gemkd.transfer.ops kernel
    fused_lookup: bool = True  # pool history chunks with embedding bags

    def __post_init__(self) -> None:
        check_fields(self)  # build_dataclass names the source
        problems = []
        if self.d % self.n_heads:
            problems.append(f"d={self.d} must be divisible by n_heads={self.n_heads}")
        if self.n_recent > self.pyramid_recent:
            problems.append(f"n_recent={self.n_recent} exceeds "
                            f"pyramid_recent={self.pyramid_recent}")
        if problems:
            raise ValueError("; ".join(problems))
        if self.shared_tables is not None:  # a copy: the frozen config owns its mapping
            object.__setattr__(self, "shared_tables", dict(self.shared_tables))

    def resolve(self: C, schema: DatasetSchema, owner: str) -> C:
        """This config for ``schema``: ``use_sequence`` and ``max_history`` resolved (see
        :func:`~gemkd.teachers.configurable.resolve_use_sequence`), and the rules that need the
        dataset checked (a :class:`ConfigError` naming ``owner``)."""
        use_sequence = resolve_use_sequence(owner, self.use_sequence, schema)
        max_history = schema.max_history if self.max_history is None else self.max_history
        problems = []
        if not (self.use_wukong or use_sequence):
            problems.append(_nothing_to_train(schema))
        if not schema.tasks or not schema.domains:
            problems.append("the dataset schema needs at least one task and one domain")
        if use_sequence and self.n_cls < 1:
            problems.append("n_cls must be >= 1 (CLS tokens keep attention well defined)")
        if use_sequence and (not is_int(max_history) or max_history < 1):
            problems.append(f"max_history must be an integer >= 1, got {max_history!r}")
        if problems:
            raise ConfigError(f"{owner}: " + "; ".join(problems))
        return dataclasses.replace(self, use_sequence=use_sequence, max_history=max_history)


def _nothing_to_train(schema: DatasetSchema) -> str:
    """Why neither arm is built, and which key brings one back."""
    if schema.sequence:
        return "use_wukong and use_sequence are both false: nothing left to train"
    return ("use_wukong is false (the sequence arm only) but the dataset has no sequence "
            "fields (no history): nothing left to train; set use_wukong: true")

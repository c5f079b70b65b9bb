"""The GEM teacher (DESIGN §3): embeddings → layers of [InterFormer cross layer → Wukong layer]
→ trunk → multi-domain, multi-task heads.

Per layer ``i``: the cross layer reads the non-sequence tokens ``X`` (their summary conditions
the sequence) and returns the sequence summary ``S_sum``, which the Wukong layer appends to ``X``;
the sequence arm keeps a shorter most-recent suffix of its pyramid tokens at every layer.
``use_wukong=False`` (sequence only) keeps ``X`` at the raw feature tokens; ``use_sequence=False``
(Wukong only) drops the pyramid and cross layers and every sequence-only table, which is also
what a dataset without sequence fields (a log without histories) gets by default.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gemkd.teachers.configurable import ConfigurableTeacher, built_config
from gemkd.teachers.gem.blocks import masked_mean
from gemkd.teachers.gem.embeddings import FeatureEmbeddings, HashedEmbedding
from gemkd.teachers.gem.gem_config import GEMConfig
from gemkd.teachers.gem.heads import build_heads
from gemkd.teachers.gem.interformer import InterFormerLayer, SequenceSummary
from gemkd.teachers.gem.pyramid import PyramidCompressor, layer_token_budgets
from gemkd.teachers.gem.wukong import WukongLayer
from gemkd.teachers.teacher_registry import BUILTIN_TEACHERS
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.models import TeacherOutput
from gemkd.transfer.ops import keep_last


@BUILTIN_TEACHERS.register("gem")
class GEM(ConfigurableTeacher):
    """GEM teacher built from a :class:`DatasetSchema` and scalar hyper-parameters.

    ``forward(batch)`` returns a :class:`~gemkd.transfer.models.TeacherOutput`: ``logits [B,
    n_tasks]`` float32 and ``repr {name: [B, dim]}`` with the representations named by
    :meth:`representation_names`, in that order:
    ``cross.<i>`` = [CLS tokens ‖ masked mean of the sequence tokens] after cross layer ``i``,
    ``wukong.<i>`` = the flattened tokens of Wukong layer ``i``, ``sequence`` = the final
    sequence summary (flattened ``S_sum``), ``trunk`` = the shared trunk the heads read.

    Hyper-parameters: a :class:`~gemkd.teachers.gem.gem_config.GEMConfig` or its fields as keywords
    (each typed and checked there; all scalars except ``shared_tables``):
    ``d`` embedding/token width; ``n_layers`` interleaved [cross, Wukong] layers; ``n_F``,
    ``n_L``, ``k``, ``mlp_width``, ``mlp_layers`` Wukong (FMB output tokens, LCB tokens, FM rank,
    MLP width/depth; ``mlp_width`` also sizes the X-summary MLP and trunk); ``n_heads``,
    ``n_cls``, ``n_xsum``, ``n_pma``, ``n_recent``, ``ffn_mult`` InterFormer (heads, CLS tokens,
    X_sum tokens, PMA seeds, recent tokens in S_sum, personalized-FFN width multiple);
    ``pyramid_recent`` (R raw events), ``pyramid_chunk`` (c), ``pyramid_shrink`` (each layer
    keeps 1/shrink of the tokens of the one below, never fewer than R); ``max_history`` (most
    recent events kept in-model; None = the schema's); ``max_rows`` (embedding rows cap, ids
    hashed); ``n_dense_tokens``; ``trunk_dim``; ``head_type`` ("domain_task" | "domain_gated"),
    ``head_hidden``, ``n_experts``; ``dropout``; ``use_wukong``/``use_sequence`` (ablations;
    ``use_sequence`` None = the sequence arm iff the dataset has sequence fields, and a
    history-less dataset drops it even when true, see
    :func:`~gemkd.teachers.configurable.resolve_use_sequence`; ``max_history`` is then unused);
    ``domain_token`` (embed the domain id as a token); ``shared_tables`` (sequence field →
    categorical feature whose table it shares; None = item ids→ad_id, categories→ad_category);
    ``kernel`` (gemkd.transfer.ops kernel); ``fused_lookup`` (pool history chunks with embedding
    bags instead of materialising ``[N, d]`` event embeddings and calling ``segment_mean``).
    """

    #: Module classes that are FSDP units (``ModuleWrapPolicy`` / ``fully_shard`` targets).
    FSDP_WRAP_CLASSES: tuple[type[nn.Module], ...] = (
        HashedEmbedding,
        WukongLayer,
        InterFormerLayer,
    )

    #: The hyper-parameters' dataclass: its fields are the ``model:`` keys (:meth:`hparam_names`).
    config_class: ClassVar[type[GEMConfig]] = GEMConfig

    def __init__(self, schema: DatasetSchema, config: GEMConfig | None = None, /,
                 **hparams: Any):
        """``GEM(schema, GEMConfig(...))`` or ``GEM(schema, d=..., ...)`` (keys checked by
        :meth:`GEMConfig.from_mapping`); keys given beside a config replace its values."""
        super().__init__()
        owner = type(self).__name__
        config = built_config(GEMConfig, config, hparams, owner)
        #: the hyper-parameters as built: use_sequence and max_history resolved for the schema
        self.config: GEMConfig = config.resolve(schema, owner)
        c = self.config
        use_sequence, max_history = bool(c.use_sequence), c.max_history
        d, n_layers, n_F, n_L, k = c.d, c.n_layers, c.n_F, c.n_L, c.k
        mlp_width, n_heads, n_cls, n_pma, n_recent = (c.mlp_width, c.n_heads, c.n_cls, c.n_pma,
                                                      c.n_recent)
        dropout, use_wukong = c.dropout, c.use_wukong
        self.schema = schema
        self.task_names = list(schema.tasks)
        self.n_layers, self.d = n_layers, d
        self.use_wukong, self.use_sequence = use_wukong, use_sequence
        self.max_history = max_history
        self.fused_lookup = c.fused_lookup

        self.embeddings = FeatureEmbeddings(
            schema, d, c.max_rows, c.n_dense_tokens, c.shared_tables, use_sequence, c.domain_token
        )
        n0 = self.embeddings.n_tokens
        n_x = n0  # tokens of the non-sequence arm entering layer i
        n_out = n_F + n_L
        n_ssum = n_cls + n_pma + n_recent if use_sequence else 0

        self.cross = nn.ModuleList()
        self.wukong = nn.ModuleList()
        if use_sequence:
            assert max_history is not None  # GEMConfig.resolve sets it with the sequence
            # trim: only the slots the batch's longest history reaches (pyramid.py's doc)
            self.pyramid = PyramidCompressor(d, c.pyramid_recent, c.pyramid_chunk, max_history,
                                             c.kernel, trim=True)
            self.budgets = layer_token_budgets(
                self.pyramid.max_tokens, c.pyramid_recent, c.pyramid_shrink, n_layers
            )
            self.cls = nn.Parameter(torch.randn(n_cls, d) * d**-0.5)
        for _ in range(n_layers):
            if use_sequence:
                self.cross.append(
                    InterFormerLayer(
                        n_x=n_x,
                        d=d,
                        n_heads=n_heads,
                        n_cls=n_cls,
                        n_xsum=c.n_xsum,
                        n_pma=n_pma,
                        n_recent=n_recent,
                        mlp_width=mlp_width,
                        ffn_mult=c.ffn_mult,
                        dropout=dropout,
                        summarize=use_wukong,
                    )
                )
            if use_wukong:
                self.wukong.append(
                    WukongLayer(n_x + n_ssum, d, n_F, n_L, k, mlp_width, c.mlp_layers, dropout)
                )
                n_x = n_out
        if use_sequence:
            self.final_summary = SequenceSummary(d, n_heads, n_cls, n_pma, n_recent, dropout)

        trunk_in = n_x * d + n_ssum * d
        layers: list[nn.Module] = [nn.LayerNorm(trunk_in), nn.Linear(trunk_in, mlp_width)]
        layers += [nn.GELU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
        layers += [nn.Linear(mlp_width, c.trunk_dim), nn.GELU()]
        self.trunk = nn.Sequential(*layers)
        self.heads = build_heads(
            c.head_type, c.trunk_dim, len(schema.domains), len(schema.tasks), c.head_hidden,
            c.n_experts
        )

        dims: dict[str, int] = {}
        for i in range(n_layers):
            if use_sequence:
                dims[f"cross.{i}"] = (n_cls + 1) * d
            if use_wukong:
                dims[f"wukong.{i}"] = n_out * d
        if use_sequence:
            dims["sequence"] = n_ssum * d
        dims["trunk"] = c.trunk_dim
        self._repr_dims = dims

    # ------------------------------------------------------------------ public API
    @classmethod
    def fsdp_wrap_modules(cls) -> tuple[type[nn.Module], ...]:
        """Module classes to shard as FSDP units: embedding tables, Wukong and cross layers.

        ``configure_model`` can do ``for m in model.fsdp_units(): fully_shard(m)`` and then
        ``fully_shard(model)``, or pass these classes to ``ModuleWrapPolicy``.
        """
        return cls.FSDP_WRAP_CLASSES

    def fsdp_units(self) -> list[nn.Module]:
        """The module instances of :meth:`fsdp_wrap_modules` in this model (each table once)."""
        classes = self.fsdp_wrap_modules()
        return [m for m in self.modules() if isinstance(m, classes)]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def init_output_bias(self, logit: Tensor) -> None:
        """Start every head's output at ``logit [n_tasks]`` (the base rate's logit: a 1 % task
        then starts calibrated instead of at p = 0.5)."""
        self.heads.set_output_bias(logit)

    def _head_domain(self, batch: Batch) -> Tensor:
        return batch.domain

    def forward(self, batch: Batch) -> TeacherOutput:
        x = self.embeddings.tokens(batch)
        b = x.shape[0]
        reprs: dict[str, Tensor] = {}
        s_sum: Tensor | None = None
        if self.use_sequence:
            assert self.max_history is not None  # set with use_sequence (__init__)
            index, offsets, max_len = keep_last(
                batch.seq_offsets, self.max_history, batch.seq_max_len
            )
            first = batch.seq_values[self.embeddings.seq_names[0]]
            n = index.shape[0] if index is not None else first.shape[0]
            if self.fused_lookup:  # embedding bags: no [N, d] intermediate
                chunks, t = self.pyramid.segments(offsets, n, max_len)
                pooled = self.embeddings.events(batch.seq_values, index, bag_offsets=chunks)
                s, mask = self.pyramid.tokens(pooled, chunks, t)
            else:  # [N, d] event embeddings, then gemkd.transfer.ops.segment_mean (kernel=...)
                events = self.embeddings.events(batch.seq_values, index)
                s, mask = self.pyramid(events, offsets, max_len)
            cls = self.cls.expand(b, -1, -1)
        for i in range(self.n_layers):
            if self.use_sequence:
                keep = self.budgets[i]
                if s.shape[1] > keep:
                    s, mask = s[:, -keep:], mask[:, -keep:]
                s, cls, s_sum = self.cross[i](x, s, mask, cls)
                reprs[f"cross.{i}"] = torch.cat([cls.flatten(1), masked_mean(s, mask)], dim=1)
            if self.use_wukong:
                x = self.wukong[i](x if s_sum is None else torch.cat([x, s_sum], dim=1))
                reprs[f"wukong.{i}"] = x.flatten(1)
        parts = [x.flatten(1)]
        if self.use_sequence:
            seq = self.final_summary(cls, s, mask).flatten(1)
            reprs["sequence"] = seq
            parts.append(seq)
        trunk = self.trunk(torch.cat(parts, dim=1))
        reprs["trunk"] = trunk
        logits = self.heads(trunk, self._head_domain(batch)).float()
        return TeacherOutput(logits=logits, repr=reprs)

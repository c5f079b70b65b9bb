"""A mid-size domain foundation model for hierarchical transfer (GEM → domain FM → student).

The same building blocks and forward contract as :class:`~gemkd.teachers.gem.GEM`, with smaller
defaults. ``domain`` (optional) specialises it to one domain of the schema: its heads then hold a
single domain's (task) heads and every example is scored by them, whatever its ``domain`` column
(which it then ignores entirely: no domain token either, unless ``domain_token=True`` is given).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from gemkd.teachers.gem.gem_config import GEMConfig
from gemkd.teachers.gem.gem_model import GEM
from gemkd.teachers.gem.heads import build_heads
from gemkd.teachers.teacher_registry import BUILTIN_TEACHERS
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError


@BUILTIN_TEACHERS.register("domain_fm")
class DomainFM(GEM):
    """GEM's architecture at domain-FM size; see :class:`GEM` for every hyper-parameter."""

    DEFAULTS: dict[str, Any] = {
        "d": 16,
        "n_layers": 1,
        "n_F": 4,
        "n_L": 4,
        "k": 4,
        "mlp_width": 128,
        "n_heads": 2,
        "n_cls": 1,
        "n_xsum": 1,
        "n_pma": 1,
        "n_recent": 4,
        "pyramid_recent": 8,
        "trunk_dim": 64,
        "head_hidden": 32,
    }

    def __init__(self, schema: DatasetSchema, config: GEMConfig | None = None, /, *,
                 domain: int | None = None, **hparams: Any):
        """``DEFAULTS`` apply unless a ``config`` is given (it is then taken as it is)."""
        if config is None:
            # a single-domain FM reads no domain column unless asked to (domain_token: true)
            specialised = {"domain_token": False} if domain is not None else {}
            hparams = {**self.DEFAULTS, **specialised, **hparams}
        super().__init__(schema, config, **hparams)
        self.domain_id = domain
        if domain is not None:
            if not isinstance(domain, int) or not 0 <= domain < len(schema.domains):
                raise ConfigError(
                    f"DomainFM: domain must be an index into the schema's domains "
                    f"{schema.domains} (0..{len(schema.domains) - 1}), got {domain!r}"
                )
            c = self.config
            self.heads = build_heads(
                c.head_type, c.trunk_dim, 1, len(schema.tasks), c.head_hidden, c.n_experts
            )

    def _head_domain(self, batch: Batch) -> Tensor:
        if self.domain_id is None:
            return batch.domain
        return batch.domain.new_zeros(batch.domain.shape)

"""Foundation models: the GEM teacher and domain FMs for hierarchical transfer."""

from teachers.domain_fm import DomainFM
from teachers.gem import GEM
from teachers.mlp import MLPRanker

__all__ = ["GEM", "DomainFM", "MLPRanker"]

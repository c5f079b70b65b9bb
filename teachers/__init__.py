"""Foundation models: the GEM teacher and domain FMs for hierarchical transfer."""

from gemkd.teachers.domain_fm import DomainFM
from gemkd.teachers.gem import GEM
from gemkd.teachers.mlp_ranker import MLPRanker
from gemkd.teachers.mlp_ranker_config import MLPRankerConfig

__all__ = ["GEM", "DomainFM", "MLPRanker", "MLPRankerConfig"]

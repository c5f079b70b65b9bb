"""The GEM teacher: Wukong + pyramid sequence arm + InterFormer + multi-domain/-task heads."""

from gemkd.teachers.gem.embeddings import FeatureEmbeddings, HashedEmbedding
from gemkd.teachers.gem.gem_config import GEMConfig
from gemkd.teachers.gem.gem_model import GEM
from gemkd.teachers.gem.heads import DomainGatedHeads, DomainTaskHeads
from gemkd.teachers.gem.interformer import InterFormerLayer, SequenceSummary
from gemkd.teachers.gem.pyramid import PyramidCompressor, pyramid_token_count
from gemkd.teachers.gem.wukong import FactorizationMachineBlock, WukongLayer

__all__ = [
    "GEM",
    "GEMConfig",
    "DomainGatedHeads",
    "DomainTaskHeads",
    "FactorizationMachineBlock",
    "FeatureEmbeddings",
    "HashedEmbedding",
    "InterFormerLayer",
    "PyramidCompressor",
    "SequenceSummary",
    "WukongLayer",
    "pyramid_token_count",
]

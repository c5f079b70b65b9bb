"""The GEM teacher: Wukong + pyramid sequence arm + InterFormer + multi-domain/-task heads."""

from teachers.gem.embeddings import FeatureEmbeddings, HashedEmbedding
from teachers.gem.heads import DomainGatedHeads, DomainTaskHeads
from teachers.gem.interformer import InterFormerLayer, SequenceSummary
from teachers.gem.model import GEM
from teachers.gem.pyramid import PyramidCompressor, pyramid_token_count
from teachers.gem.wukong import FactorizationMachineBlock, WukongLayer

__all__ = [
    "GEM",
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

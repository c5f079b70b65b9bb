"""Small modules between teacher and student (DESIGN §5)."""

from gemkd.adapters.aux_head import AuxDistillHead, scale_grad
from gemkd.adapters.code_attention import CodeAttentionPool
from gemkd.adapters.compressor import (
    ReprCompressor,
    dequantize_codes,
    fit_compressor,
    quantize_codes,
)
from gemkd.adapters.student_adapter import StudentAdapter

__all__ = [
    "AuxDistillHead",
    "CodeAttentionPool",
    "ReprCompressor",
    "StudentAdapter",
    "dequantize_codes",
    "fit_compressor",
    "quantize_codes",
    "scale_grad",
]

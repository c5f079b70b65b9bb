"""Small modules between teacher and student (DESIGN §5)."""

from adapters.aux_head import AuxDistillHead, scale_grad
from adapters.code_attention import CodeAttentionPool
from adapters.compressor import ReprCompressor, dequantize_codes, fit_compressor, quantize_codes
from adapters.student_adapter import StudentAdapter

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

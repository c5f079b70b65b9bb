"""Jagged-tensor ops for variable-length event sequences (DESIGN §7).

A batch of B sequences is ``values [N]`` or ``[N, D]`` plus ``offsets`` int64 ``[B+1]``
(``offsets[0] == 0``, ``offsets[-1] == N``, non-decreasing; empty segments allowed), events
oldest first within a segment. Each op has a PyTorch reference
(``gemkd.transfer.ops.jagged_reference``) and a Triton kernel
(``gemkd.transfer.ops.triton_kernels``), chosen per call with ``kernel="auto" | "torch" |
"triton"``: Triton for CUDA tensors, the reference on CPU.
"""

from gemkd.transfer.ops.dispatch import (
    KERNELS,
    jagged_target_attention,
    jagged_to_padded,
    lengths_to_mask,
    padded_to_jagged,
    segment_max,
    segment_mean,
    segment_sum,
    select_kernel,
    triton_available,
)
from gemkd.transfer.ops.truncate import keep_last

__all__ = [
    "KERNELS",
    "jagged_target_attention",
    "jagged_to_padded",
    "keep_last",
    "lengths_to_mask",
    "padded_to_jagged",
    "segment_max",
    "segment_mean",
    "segment_sum",
    "select_kernel",
    "triton_available",
]

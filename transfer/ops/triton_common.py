"""What every Triton kernel module shares: the row-tile size and the accumulator dtype."""

from __future__ import annotations

import torch
import triton.language as tl

BLOCK_N = 32  # rows per tile


def acc(dtype: torch.dtype):
    """float64 accumulators for float64 inputs, float32 for everything else."""
    return tl.float64 if dtype == torch.float64 else tl.float32

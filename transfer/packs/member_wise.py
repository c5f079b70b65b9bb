"""A loss over a stacked pack's ``[K, ...]`` tensors, one member's slice at a time.

Why: the CPU kernels of transcendental ops (the sigmoid inside BCE-with-logits' gradient,
``exp``, ``log1p``) compute most elements in SIMD vectors and the last few of a tensor one at a
time, and the two paths differ in the last bit. Over a stacked ``[K, B, T]`` tensor, which of a
member's elements fall in that tail depends on K and the member's place, so a member of a pack
of 3 differed from its run alone by up to 3.7e-9 NE (docs/notes/2026-12-06-integrity.md). A
slice ``[k:k+1]`` is its own tensor to the kernel: its elements take the paths they take in a
run alone (a pack of one), so the member's numbers do not depend on the pack. A mean over the
rows of ``[K, B, T]`` also rounds otherwise than over ``[1, B, T]`` (T > 1): a loss is sliced
with its mean.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def member_wise(fn: Callable[..., Tensor], *args: Tensor | float, members: int | None = None
                ) -> Tensor:
    """``fn(*args)`` computed one member at a time: every tensor argument of ``members``
    (default: the first argument's leading dimension, when it is 3-D) rows along dimension 0
    is sliced ``[k:k+1]``, the others (shared ``[B, T]`` targets, floats) passed whole, and the
    K results concatenated. A 2-D first argument (a run's own step) or a pack of one is
    ``fn(*args)`` itself."""
    first = args[0]
    k = members if members is not None else (
        first.shape[0] if isinstance(first, Tensor) and first.dim() == 3 else 1)
    if k <= 1:
        return fn(*args)

    def part(a: Tensor | float, i: int) -> Tensor | float:
        if isinstance(a, Tensor) and a.dim() == 3 and a.shape[0] == k:
            return a[i:i + 1]
        return a

    return torch.cat([fn(*(part(a, i) for a in args)) for i in range(k)])

"""On-device history truncation for students (DESIGN §2.2, §2.5); the hashed tables are
:mod:`transfer.layers`' (one class for teachers and students)."""

from __future__ import annotations

import torch
from torch import Tensor

from transfer.layers import SHARED_TABLES, HashedEmbedding

__all__ = ["SHARED_TABLES", "HashedEmbedding", "recent_index"]


def recent_index(offsets: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Indices of the ``k`` most recent (last) events of each segment, and their new offsets.

    ``offsets [B+1]`` → ``(index [N'], new_offsets [B+1])`` with ``N' = Σ min(len_b, k)``;
    vectorised, one host sync (to learn ``N'``), events keep their oldest-first order.
    """
    lengths = offsets[1:] - offsets[:-1]
    keep = lengths.clamp(max=k)
    new_offsets = torch.zeros_like(offsets)
    new_offsets[1:] = torch.cumsum(keep, 0)
    n = int(new_offsets[-1])
    seg = torch.repeat_interleave(torch.arange(keep.shape[0], device=offsets.device), keep,
                                  output_size=n)
    pos = torch.arange(n, device=offsets.device) - new_offsets[seg]
    return offsets[1:][seg] - keep[seg] + pos, new_offsets

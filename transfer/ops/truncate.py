"""Keeping the last ``k`` events of every jagged segment (the most recent: events are oldest
first), on the device: how GEM, the MLP ranker and the students cap a history in-model."""

from __future__ import annotations

import torch
from torch import Tensor


def keep_last(offsets: Tensor, k: int, max_len: int) -> tuple[Tensor | None, Tensor, int]:
    """Truncate every segment of ``offsets [B+1]`` to its last ``k`` values.

    Returns ``(index, new_offsets, new_max_len)``: ``values.index_select(0, index)`` are the kept
    values, oldest first within a segment, ``new_offsets`` their segments, ``new_max_len`` the
    longest kept. ``max_len`` is the longest segment (at least: a batch's ``seq_max_len``, a host
    int): when it is ``<= k`` nothing is cut and ``index`` is None (no copy, no host sync);
    otherwise one host sync learns how many values are kept.
    """
    if k < 0:
        raise ValueError(f"keep_last: k must be >= 0, got {k}")
    if max_len <= k:
        return None, offsets, max_len
    lengths = offsets[1:] - offsets[:-1]
    kept = lengths.clamp(max=k)
    new_offsets = torch.zeros_like(offsets)
    new_offsets[1:] = torch.cumsum(kept, 0)
    n = int(new_offsets[-1])
    seg = torch.repeat_interleave(torch.arange(kept.shape[0], device=offsets.device), kept,
                                  output_size=n)
    # the kept values of a segment end where it ends: end - kept + position within the kept
    index = offsets[seg + 1] - new_offsets[seg + 1] + torch.arange(n, device=offsets.device)
    return index, new_offsets, k

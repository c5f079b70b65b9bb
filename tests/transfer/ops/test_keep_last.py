"""``gemkd.transfer.ops.keep_last`` (the last k events of every segment) against a naive loop."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gemkd.transfer.ops import keep_last


def offsets_of(lengths: list[int]) -> torch.Tensor:
    off = [0]
    for n in lengths:
        off.append(off[-1] + n)
    return torch.tensor(off, dtype=torch.int64)


def naive(lengths: list[int], k: int) -> tuple[list[int], list[int]]:
    """The kept value positions and the new offsets, one segment at a time."""
    index, offsets, start = [], [0], 0
    for n in lengths:
        kept = list(range(start, start + n))[max(0, n - k):]
        index += kept
        offsets.append(offsets[-1] + len(kept))
        start += n
    return index, offsets


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 12), max_size=8), k=st.integers(0, 14))
def test_keep_last_matches_the_naive_loop(lengths, k):
    offsets = offsets_of(lengths)
    max_len = max(lengths, default=0)
    index, new_offsets, new_max = keep_last(offsets, k, max_len)
    want_index, want_offsets = naive(lengths, k)
    if max_len <= k:  # nothing to cut: the inputs as they are, no copy
        assert index is None and new_offsets is offsets and new_max == max_len
        assert want_index == list(range(sum(lengths))) and want_offsets == offsets.tolist()
        return
    assert index.tolist() == want_index and new_offsets.tolist() == want_offsets
    assert new_max == k and index.dtype == offsets.dtype


def test_keep_last_keeps_the_most_recent_values_in_order():
    offsets = offsets_of([5, 0, 2, 7])
    values = torch.arange(14)
    index, new_offsets, max_len = keep_last(offsets, 3, 7)
    assert max_len == 3 and new_offsets.tolist() == [0, 3, 3, 5, 8]
    assert values[index].tolist() == [2, 3, 4, 5, 6, 11, 12, 13]


def test_keep_last_rejects_a_negative_k():
    with pytest.raises(ValueError, match="k must be >= 0"):
        keep_last(offsets_of([1]), -1, 1)

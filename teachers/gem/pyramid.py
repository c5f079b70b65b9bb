"""The pyramid sequence arm: a jagged history compressed to multi-resolution tokens.

Event positions are counted from the most recent (``p = 0``). Level 0 keeps the last ``R`` events
raw; level ``ℓ`` covers the ``R·cˡ`` events before level ``ℓ-1`` pooled (segment mean) into ``R``
chunks of ``cˡ`` events. A history of length ``L`` therefore becomes
``R · ⌈log_c(L (c-1)/R + 1)⌉`` tokens: the token count, and with it every attention and FFN
cost downstream, grows logarithmically in ``L``; only the pooling itself touches every event (one
fused embedding-bag mean per event field, or a lookup plus ``gemkd.transfer.ops.segment_mean``).

Tokens are laid out right-aligned in a ``[B, T, d]`` tensor (the most recent event last, empty
chunks of short histories on the left, ``mask`` False there), so the layers above can keep a
shorter, most-recent suffix (``layer_token_budgets``): each layer sees a shorter sequence than
the one below, and which tokens an example keeps never depends on the rest of its batch.

``trim=True`` (what GEM builds) lays out only the slots a history of the batch's ``max_len``
events can reach: the last level's chunks past ``max_len`` are empty in every row (a 256-event
cap fills 26 of the 4 levels' 32 slots at R = 8, c = 4), and attending over, normalising and
projecting them is work whose result is masked away. The reachable slots keep their columns
(counted from the right) and their slot embeddings, so every output is the untrimmed layout's
up to float summation order (tests/teachers/gem/test_gem_fast_paths.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from gemkd.transfer import ops
from gemkd.transfer.options import Kernel


def pyramid_coverage(levels: int, recent: int, chunk: int) -> int:
    """Events covered by ``levels`` levels: ``R (1 + c + … + c^(levels-1))``."""
    return recent * sum(chunk**lvl for lvl in range(levels))


def pyramid_levels(length: int, recent: int, chunk: int) -> int:
    """The fewest levels (at least 1) that cover a history of ``length`` events."""
    levels = 1
    while pyramid_coverage(levels, recent, chunk) < length:
        levels += 1
    return levels


def pyramid_token_count(length: int, recent: int, chunk: int) -> int:
    """Tokens a batch whose longest history is ``length`` is compressed to."""
    return recent * pyramid_levels(length, recent, chunk)


def pyramid_reachable_tokens(length: int, recent: int, chunk: int) -> int:
    """Slots (counted from the most recent) that a history of ``length`` events can fill, those
    starting before position ``length``, but never fewer than the ``R`` raw slots of level 0
    (the layers above read the ``n_recent <= R`` most recent tokens of every row)."""
    levels = pyramid_levels(length, recent, chunk)
    if levels == 1:
        return recent
    last = pyramid_coverage(levels - 1, recent, chunk)  # the last level's first position
    return recent * (levels - 1) + min(recent, -(-(length - last) // chunk ** (levels - 1)))


def layer_token_budgets(max_tokens: int, recent: int, shrink: float, n_layers: int) -> list[int]:
    """Most-recent tokens layer ``i`` keeps: ``max(R, ⌈max_tokens / shrinkⁱ⌉)``, non-increasing."""
    return [max(recent, math.ceil(max_tokens / shrink**i)) for i in range(n_layers)]


class PyramidCompressor(nn.Module):
    """Jagged events ``[N, d]`` → right-aligned pyramid tokens ``[B, T, d]`` and mask ``[B, T]``.

    ``T = R · levels(min(max_len, max_history))``; each token gets a learned embedding of its
    slot counted from the most recent (so it knows its level and recency).
    """

    def __init__(self, d: int, recent: int, chunk: int, max_history: int,
                 kernel: Kernel = "auto", trim: bool = False):
        super().__init__()
        if recent < 1 or chunk < 2 or max_history < 1:
            raise ValueError(
                f"need pyramid_recent >= 1, pyramid_chunk >= 2, max_history >= 1; got "
                f"{recent}, {chunk}, {max_history}"
            )
        self.recent, self.chunk, self.max_history = recent, chunk, max_history
        self.kernel = kernel
        #: lay out only the slots ``max_len`` events can reach (module doc); not a weight
        self.trim = trim
        self.max_levels = pyramid_levels(max_history, recent, chunk)
        self.max_tokens = recent * self.max_levels
        #: the slots' start positions per layout (:meth:`_starts`); a cache, not state
        self._bounds: dict[tuple[tuple[int, ...], torch.dtype, torch.device], Tensor] = {}
        self.slot = nn.Embedding(self.max_tokens, d)
        nn.init.normal_(self.slot.weight, std=d**-0.5)

    def n_tokens(self, max_len: int) -> int:
        """Columns of the layout for a batch whose longest history is ``max_len`` events."""
        length = min(max_len, self.max_history)
        if self.trim:
            return pyramid_reachable_tokens(length, self.recent, self.chunk)
        return pyramid_token_count(length, self.recent, self.chunk)

    def segments(self, offsets: Tensor, n: int, max_len: int) -> tuple[Tensor, int]:
        """The pyramid chunks as jagged segments over the ``n`` events.

        Returns ``(chunk_offsets [B·T + 1], T)``: chunk ``j`` of example ``b`` (column ``j`` of
        its right-aligned tokens) is events ``chunk_offsets[b·T + j] : chunk_offsets[b·T + j + 1]``,
        so any segment op (mean, sum, an embedding bag) pools the chunks. Events must already be
        truncated to at most ``max_history`` per example.
        """
        t = self.n_tokens(max_len)
        r, c = self.recent, self.chunk
        # First position (counted from the most recent, p = 0) of every slot, oldest last.
        bounds = [
            pyramid_coverage(lvl, r, c) + i * c**lvl for lvl in range(-(-t // r)) for i in range(r)
        ][:t]
        # Column j >= 1 (slot t-1-j) starts where slot t-j's positions end; column 0 (the oldest
        # slot) runs back to the example's first event, so events beyond the pyramid's coverage
        # (a batch whose seq_max_len understates it) fall into it. O(B·T): no per-event work.
        ends, lengths = offsets[1:], offsets[1:] - offsets[:-1]
        q = self._starts(tuple(bounds[1:][::-1]), offsets)
        starts = torch.empty(ends.shape[0], t, dtype=offsets.dtype, device=offsets.device)
        starts[:, 0] = offsets[:-1]
        starts[:, 1:] = ends.unsqueeze(1) - torch.minimum(q.unsqueeze(0), lengths.unsqueeze(1))
        return torch.cat([starts.view(-1), offsets[-1:]]), t

    def _starts(self, bounds: tuple[int, ...], like: Tensor) -> Tensor:
        """``bounds`` as a tensor on ``like``'s device, made once per layout: a tensor built
        from a list every step is a host→device copy on a GPU."""
        key = (bounds, like.dtype, like.device)
        out = self._bounds.get(key)
        if out is None:
            out = self._bounds[key] = torch.tensor(bounds, dtype=like.dtype, device=like.device)
        return out

    def tokens(self, pooled: Tensor, chunk_offsets: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """Pooled chunks ``[B·T, d]`` → ``(tokens [B, T, d], mask [B, T])`` with slot embeddings."""
        d = pooled.shape[1]
        b = pooled.shape[0] // t
        mask = (chunk_offsets[1:] > chunk_offsets[:-1]).view(b, t)
        pos = self.slot.weight[:t].flip(0)  # column j holds slot t-1-j
        tokens = (pooled.view(b, t, d) + pos) * mask.unsqueeze(-1).to(pooled.dtype)
        return tokens, mask

    def forward(self, events: Tensor, offsets: Tensor, max_len: int) -> tuple[Tensor, Tensor]:
        """Event embeddings ``[N, d]`` → ``(tokens [B, T, d], mask [B, T])`` (segment means)."""
        chunk_offsets, t = self.segments(offsets, events.shape[0], max_len)
        if events.shape[0] == 0:
            pooled = events.new_zeros(chunk_offsets.shape[0] - 1, events.shape[1])
        else:
            pooled = ops.segment_mean(events, chunk_offsets, kernel=self.kernel)
        return self.tokens(pooled, chunk_offsets, t)

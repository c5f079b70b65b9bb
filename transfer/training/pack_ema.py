"""The weight average of a pack's members, each at its own decay.

Why: :class:`~gemkd.transfer.training.ema.StreamEMA` averages one run's weights after every
optimiser step with the warm-up rule ``w_n = 1 - min(decay, (1 + n) / (10 + n))``; a pack
(:mod:`gemkd.transfer.distill.pack`) keeps K members' trained weights in one flat buffer
(:class:`~gemkd.transfer.training.pack_adamw.PackAdamW`) and their averages in another. This
runs StreamEMA's flat update on it — the first update copies, then ``(current - avg) · w``
added to ``avg`` — with ``w`` the member's own host-computed weight (a scalar when the pack
shares one decay, else a per-element float32 tensor: the same float32 product), so each
member's average is its own run's, bit for bit. Weights that are not trained (frozen tables,
constant buffers) are their own average and are not kept here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gemkd.transfer.training.ema import _check, _host_weight


class PackEMA:
    """``data``: the flat buffer of the members' trained weights; ``member``: the member index
    of each of its elements (``[N]`` long); ``decays``: one per member."""

    def __init__(self, data: Tensor, member: Tensor, decays: list[float]) -> None:
        for d in decays:
            _check(d)
        if data.shape != member.shape:
            raise ValueError("PackEMA: one member index per element of the flat buffer")
        self.data, self.member, self.decays = data, member, list(decays)
        # the buffer is runs of one member each: a weight per run spreads in one op
        self._run_member, self._run_len = torch.unique_consecutive(member, return_counts=True)
        self.average = data.detach().clone()
        self._diff = torch.empty_like(self.average)
        self.n = 0

    def _weight(self) -> Tensor | float:
        ws = [_host_weight(d, self.n, self.average.dtype) for d in self.decays]
        if len(set(ws)) == 1:
            return ws[0]
        per_run = torch.tensor(ws, dtype=self.average.dtype)[self._run_member]
        return per_run.repeat_interleave(self._run_len, output_size=self.member.numel())

    @torch.no_grad()
    def update(self) -> None:
        """After an optimiser step (StreamEMA's ``on_train_batch_end``)."""
        if self.n == 0:
            self.average.copy_(self.data)
        else:
            self._diff.copy_(self.data)
            self._diff.sub_(self.average).mul_(self._weight())
            self.average.add_(self._diff)
        self.n += 1

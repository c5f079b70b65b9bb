"""The weight average of a pack's members, each at its own decay.

Why: :class:`~gemkd.transfer.training.ema.StreamEMA` averages one run's weights after every
optimiser step with the warm-up rule ``w_n = 1 - min(decay, (1 + n) / (10 + n))``; a pack
(:mod:`gemkd.transfer.packs.pack`) keeps K members' trained weights as stacked tensors
``[K, ...]`` (:class:`~gemkd.transfer.packs.adamw.PackAdamW`) and their averages beside them.
The first update copies; later ones take each member's slices with its own host-computed
weight ``w``:

* ``lerp`` (batched packs): ``torch._foreach_lerp_(avg, current, w)``, one pass, one call per
  distinct weight;
* otherwise (exact packs): StreamEMA's multi-tensor update ``avg + (current - avg) · w``, op
  for op, so each member's average is its Lightning run's, bit for bit.

Both treat each member's slice as a tensor of its own, so a member's average does not depend on
its pack. Weights that are not trained (frozen tables, constant buffers) are their own average
and are not kept here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gemkd.transfer.training.ema import _check, _host_weight


class PackEMA:
    """``params``: the stacked ``[K, ...]`` trained weights (contiguous); ``decays``: one per
    member; ``lerp``: the update (see the module doc)."""

    def __init__(self, params: list[Tensor], decays: list[float], lerp: bool = False) -> None:
        for d in decays:
            _check(d)
        k = len(decays)
        if not params or any(p.shape[0] != k or not p.is_contiguous() for p in params):
            raise ValueError(f"PackEMA: contiguous [K, ...] weights with one decay per member "
                             f"(K = {k})")
        self.decays, self.lerp = list(decays), lerp
        self.params = [p.detach() for p in params]
        self.average = [p.clone() for p in self.params]
        #: each member's slices, in parameter order
        self._current = [[p[j] for p in self.params] for j in range(k)]
        self._avg = [[a[j] for a in self.average] for j in range(k)]
        self._all_current = [t for member in self._current for t in member]
        self._all_avg = [t for member in self._avg for t in member]
        self.n = 0

    @torch.no_grad()
    def update(self) -> None:
        """After an optimiser step (StreamEMA's ``on_train_batch_end``)."""
        if self.n == 0:
            torch._foreach_copy_(self.average, self.params)
        else:
            by_weight: dict[float, list[int]] = {}
            for j, d in enumerate(self.decays):
                by_weight.setdefault(_host_weight(d, self.n, self.average[0].dtype), []
                                     ).append(j)
            for w, members in by_weight.items():
                if len(members) == len(self.decays):  # one weight: every member's slices
                    avg, cur = self._all_avg, self._all_current
                else:
                    avg = [t for j in members for t in self._avg[j]]
                    cur = [t for j in members for t in self._current[j]]
                if self.lerp:
                    torch._foreach_lerp_(avg, cur, w)
                else:  # StreamEMA's _foreach_ema, float tensors
                    diff = torch._foreach_sub(cur, avg)
                    torch._foreach_mul_(diff, w)
                    torch._foreach_add_(avg, diff)
        self.n += 1

    @torch.no_grad()
    def put_in_place(self) -> None:
        """Copy every member's average over its weights (the end of a fit)."""
        if self.n:
            torch._foreach_copy_(self.params, self.average)

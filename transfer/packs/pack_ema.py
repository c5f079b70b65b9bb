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
and are not kept here. A table updated row-wise (``lazy``) is averaged lazily
(:class:`~gemkd.transfer.training.lazy_ema.LazyRowAverage`, every member at its own decay):
:meth:`PackEMA.catch_up` before the optimiser's step, :meth:`PackEMA.update` after it, with the
rows the step touched.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gemkd.transfer.training.ema import _check, _host_weight
from gemkd.transfer.training.lazy_ema import LazyRowAverage


class PackEMA:
    """``params``: the stacked ``[K, ...]`` trained weights (contiguous); ``decays``: one per
    member; ``lerp``: the update (see the module doc); ``lazy``: the indices of ``params``
    that are row-wise tables ``[K, R, d]``."""

    def __init__(self, params: list[Tensor], decays: list[float], lerp: bool = False,
                 lazy: set[int] | frozenset[int] = frozenset()) -> None:
        for d in decays:
            _check(d)
        k = len(decays)
        if not params or any(p.shape[0] != k or not p.is_contiguous() for p in params):
            raise ValueError(f"PackEMA: contiguous [K, ...] weights with one decay per member "
                             f"(K = {k})")
        self.decays, self.lerp = list(decays), lerp
        self.params = [p.detach() for p in params]
        self.average = [p.clone() for p in self.params]
        self.lazy = {i: LazyRowAverage(self.average[i], self.params[i], members=k)
                     for i in sorted(lazy)}
        dense = [i for i in range(len(self.params)) if i not in self.lazy]
        #: each member's slices, in parameter order (the dense weights)
        self._current = [[self.params[i][j] for i in dense] for j in range(k)]
        self._avg = [[self.average[i][j] for i in dense] for j in range(k)]
        self._dense_params = [self.params[i] for i in dense]
        self._dense_average = [self.average[i] for i in dense]
        self._all_current = [t for member in self._current for t in member]
        self._all_avg = [t for member in self._avg for t in member]
        self.n = 0

    @torch.no_grad()
    def catch_up(self, rows: dict[int, Tensor]) -> None:
        """Before an optimiser step: each lazy table's ``rows`` (of its flat ``[K·R, d]`` view,
        the step's touched rows) brought up to date."""
        for i, lazy in self.lazy.items():
            lazy.catch_up(rows[i])

    @torch.no_grad()
    def update(self, rows: dict[int, Tensor] | None = None) -> None:
        """After an optimiser step (StreamEMA's ``on_train_batch_end``); ``rows``: each lazy
        table's touched rows, as given to :meth:`catch_up`."""
        for i, lazy in self.lazy.items():
            if rows is None:
                raise ValueError("PackEMA.update: a lazy table's average needs the step's rows")
            lazy.update(rows[i], [_host_weight(d, self.n, self.average[i].dtype)
                                  for d in self.decays])
        if self.n == 0 and self._dense_params:
            torch._foreach_copy_(self._dense_average, self._dense_params)
        elif self._dense_params:
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
        for lazy in self.lazy.values():
            lazy.flush()
        if self.n:
            torch._foreach_copy_(self.params, self.average)

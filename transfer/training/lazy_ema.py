"""The weight average of a table updated row-wise: only the rows a step touched, the decay of
the steps a row missed applied when it is next touched (DESIGN §3).

Why: under a row-wise table optimiser (:mod:`gemkd.transfer.training.table_optim`) a row no
batch looked up keeps its weights, so the dense average's update of that row,
``avg ← avg + (w − avg) · a_i`` with ``w`` fixed, only shrinks ``avg − w`` by ``(1 − a_i)``
each step. Over the steps ``[j, n)`` it missed that is ``avg − w`` times
``Π (1 − a_i) = exp(C_n − C_j)``, ``C`` the running sum of ``log(1 − a_i)`` (float64, one
value per step and member). So a row is brought up to date in one update when it is touched
again (before the optimiser changes it) and every row at a flush (before the average is read:
a swap, a checkpoint, the end of a fit): the dense average's values, up to rounding, at a cost
that follows the touched rows, not the table. The first update copies every row (as the dense
average's does).

A pack's stacked ``[K, R, d]`` table is K members' tables, each with its own decay; its row
``k·R + r`` is member k's row r.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class LazyRowAverage:
    """``avg``, ``current``: the average and the weights of one table ``[..., d]`` (``[K, R, d]``
    for K members, one weight per member in each update); ``done``: the updates already in
    ``avg`` (every row up to date with them)."""

    def __init__(self, avg: Tensor, current: Tensor, members: int = 1, done: int = 0) -> None:
        d = avg.shape[-1]
        self.avg, self.current = avg.view(-1, d), current.detach().view(-1, d)
        if self.avg.shape != self.current.shape or self.avg.shape[0] % members:
            raise ValueError(f"LazyRowAverage: average {tuple(avg.shape)} and weights "
                             f"{tuple(current.shape)} must be one [K·R, d] table, K = {members}")
        self.k, self.rows_per_member = members, self.avg.shape[0] // members
        #: each row's member
        self._member_of = torch.arange(members).repeat_interleave(self.rows_per_member)
        #: updates done; each row is up to date with the first ``last[row]`` of them
        self.n = done
        self.last = torch.full((self.avg.shape[0],), max(done, 1), dtype=torch.long)
        #: column ``j − base``: each member's sum of ``log(1 − a_i)`` over updates base ≤ i < j
        self._base = max(done, 1)
        self._log_keep = torch.zeros(members, 64, dtype=torch.float64)
        #: (rows, their caught-up average) between catch_up and update
        self._pending: tuple[Tensor, Tensor] | None = None

    def _member(self, rows: Tensor) -> Tensor:
        return self._member_of.index_select(0, rows)

    def _missed(self, rows: Tensor) -> Tensor:
        """``[U, 1]``: ``1 − Π(1 − a_i)`` over the updates each of ``rows`` missed."""
        cols = self._log_keep.shape[1]
        flat = self._log_keep.view(-1)
        start = self._member(rows) * cols - self._base
        now = flat.index_select(0, start + self.n)
        then = flat.index_select(0, start + self.last.index_select(0, rows))
        return (-torch.expm1(now - then)).to(self.avg.dtype).unsqueeze(1)

    def catch_up(self, rows: Tensor) -> None:
        """Before the optimiser step that changes ``rows`` (each once): their average brought
        up to date with the updates they missed (kept for :meth:`update` of the same ``rows``,
        which writes them once)."""
        self._pending = None
        if self.n == 0:
            return
        a = self.avg.index_select(0, rows)
        self._pending = (rows, a + (self.current.index_select(0, rows) - a) * self._missed(rows))

    def update(self, rows: Tensor, weights: list[float]) -> None:
        """After that step: ``avg ← avg + (w − avg) · a`` on ``rows`` (the dense average's
        ops, in its order), ``a`` = ``weights[k]`` for member k's rows; the first update copies
        every row."""
        if self.n == 0:
            self.avg.copy_(self.current)
            self.n = 1
            return
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is not rows:
            self.avg.index_copy_(0, pending[0], pending[1])  # caught up: written as it is
            self.last.index_fill_(0, pending[0], self.n)
            pending = None
        a = self.avg.index_select(0, rows) if pending is None else pending[1]
        if self.k == 1:
            share: Tensor | float = weights[0]
        else:
            share = torch.tensor(weights, dtype=a.dtype).index_select(
                0, self._member(rows)).unsqueeze(1)
        a = a + (self.current.index_select(0, rows) - a) * share
        self.avg.index_copy_(0, rows, a)
        self._record(weights)
        self.n += 1
        self.last.index_fill_(0, rows, self.n)

    def flush(self) -> None:
        """Every row up to date (before the average is read)."""
        pending, self._pending = self._pending, None
        if pending is not None:  # caught up, its update not done: keep the catch-up
            self.avg.index_copy_(0, pending[0], pending[1])
            self.last.index_fill_(0, pending[0], self.n)
        if self.n == 0:
            return
        everything = torch.arange(self.avg.shape[0])
        self.avg += (self.current - self.avg) * self._missed(everything)
        self.last.fill_(self.n)

    def _record(self, weights: list[float]) -> None:
        col = self.n - self._base
        if col + 1 >= self._log_keep.shape[1]:
            grown = torch.zeros(self.k, 2 * self._log_keep.shape[1], dtype=torch.float64)
            grown[:, :self._log_keep.shape[1]] = self._log_keep
            self._log_keep = grown
        keep = torch.tensor([math.log1p(-w) for w in weights], dtype=torch.float64)
        self._log_keep[:, col + 1] = self._log_keep[:, col] + keep

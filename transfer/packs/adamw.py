"""AdamW over a pack's stacked parameters, each member with its own learning rate and decay.

Why: a pack (:mod:`gemkd.transfer.packs.pack`) trains K copies of one student as tensors
``[K, ...]``, and torch's AdamW takes one ``lr`` per group. So every member's slice of every
stacked parameter (``p[k]``, contiguous) is a tensor of its own in torch's own multi-tensor
updates, with the member's settings; two of them:

* ``fused`` (batched packs): torch's fused CPU AdamW kernel (``torch._fused_adamw_``, what
  ``AdamW(fused=True)`` runs), one call per distinct (lr, weight decay) over its slices: one pass
  over the weights instead of the foreach form's eleven;
* ``foreach`` (exact packs, each member its own modules): torch's non-capturable foreach update
  (``torch.optim.adam._multi_tensor_adam``) op for op, its per-tensor scalars (the decoupled
  decay factor ``1 - lr · wd``, the step size ``-lr / (1 - β1^t)``) each slice's member's, as
  :class:`~gemkd.transfer.training.flat_adamw.FlatAdamW` (a Lightning run alone) computes them.

Both kernels treat each tensor of their lists on its own, so a member's values do not depend
on its pack: the fused update of a pack of one (a run alone) gives every member's bits, and the
foreach update is the Lightning run's (``tests/transfer/packs/test_adamw.py``). β1, β2 and ε are
shared by the pack (a member that differs cannot join it).

A stacked table ``[K, R, d]`` whose ``rule`` is row-wise (``rowwise_adagrad``, ``sparse_adam``:
:mod:`gemkd.transfer.training.table_optim`) takes a row-sparse gradient and is updated on the
rows it touched, all members' in one call, each row at its member's lr and decay (elementwise
ops on rows: a member's rows do not depend on the others').
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gemkd.transfer.training.table_optim import (
    ROW_RULES,
    lazy_adam_,
    rowwise_adagrad_,
    touched_rows,
)


@dataclass(frozen=True)
class MemberGroup:
    """One stacked parameter's settings per member: ``lr`` and ``weight_decay`` lists of K."""

    lr: list[float]
    weight_decay: list[float]


class PackAdamW:
    """``params``: stacked tensors ``[K, ...]`` (made contiguous in place); ``groups``: each
    one's per-member settings, in the same order. ``leaves``, when given, ``leaves[i][k]`` is
    member k's own parameter i: re-pointed at slice ``[k]`` of ``params[i]``, and the gradients
    a step reads are theirs (members trained as their own modules) rather than the stacked
    tensors' (a batched pack). ``fused``: the update (see the module doc). ``rules``: each
    parameter's table rule (None: ``dense_adamw`` for all); a row-wise one needs a stacked
    ``[K, R, d]`` table and no ``leaves``."""

    def __init__(self, params: list[Tensor], groups: list[MemberGroup], *,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 leaves: Sequence[Sequence[Tensor]] | None = None, fused: bool = False,
                 rules: Sequence[str] | None = None) -> None:
        if len(params) != len(groups) or not params:
            raise ValueError("PackAdamW needs one MemberGroup per stacked parameter")
        rules = list(rules) if rules is not None else ["dense_adamw"] * len(params)
        if len(rules) != len(params):
            raise ValueError("PackAdamW: one rule per stacked parameter")
        #: the row-wise tables: index -> rule
        self.tables = {i: r for i, r in enumerate(rules) if r in ROW_RULES}
        if self.tables and leaves is not None:
            raise ValueError("PackAdamW: row-wise tables need a batched pack (no leaves)")
        if any(params[i].dim() != 3 for i in self.tables):
            raise ValueError("PackAdamW: a row-wise table is a stacked [K, R, d] tensor")
        k = params[0].shape[0]
        if any(p.shape[0] != k or len(g.lr) != k or len(g.weight_decay) != k
               for p, g in zip(params, groups, strict=True)):
            raise ValueError(f"every stacked parameter and setting must have {k} members")
        if leaves is not None and len(leaves) != len(params):
            raise ValueError("leaves: one list of member tensors per stacked parameter")
        self.params, self.groups, self.leaves = list(params), list(groups), leaves
        self.k, self.betas, self.eps, self.fused = k, betas, eps, fused
        with torch.no_grad():
            for p in self.params:
                if not p.is_contiguous():
                    p.data = p.data.contiguous()
            for p, members in zip(self.params, leaves or [], strict=False):
                if len(members) != k or any(q.shape != p.shape[1:] for q in members):
                    raise ValueError("leaves: one tensor per member, each of a member's shape")
                for j, q in enumerate(members):
                    q.data = p.data[j]
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.step_count = 0
        self._step_t = torch.zeros((), dtype=torch.float32, device=self.params[0].device)
        #: row-wise tables: each flat row's member's lr and decay (a step gathers its rows'),
        #: Adagrad's sums
        self._table_lr = {i: self._per_row(i, self.groups[i].lr) for i in self.tables}
        self._table_wd = {i: self._per_row(i, self.groups[i].weight_decay) for i in self.tables
                          if any(self.groups[i].weight_decay)}
        self.row_sums = {i: self.params[i].new_zeros(k * self.params[i].shape[1])
                         for i, r in self.tables.items() if r == "rowwise_adagrad"}
        self._rows: dict[int, tuple[Tensor, Tensor]] | None = None
        #: (parameter, member) pairs in the order of the update's lists, and their settings
        self._slots = [(i, j) for j in range(k) for i in range(len(self.params))
                       if i not in self.tables]
        self._data = [self.params[i].data[j] for i, j in self._slots]
        self._m = [self.exp_avg[i][j] for i, j in self._slots]
        self._v = [self.exp_avg_sq[i][j] for i, j in self._slots]
        self._lr = [self.groups[i].lr[j] for i, j in self._slots]
        self._wd = [self.groups[i].weight_decay[j] for i, j in self._slots]
        #: fused: the slots of each distinct (lr, weight decay), one kernel call each, with
        #: their weights and moments (the gradients are a step's own)
        self._calls: dict[tuple[float, float], list[int]] = {}
        for s, setting in enumerate(zip(self._lr, self._wd, strict=True)):
            self._calls.setdefault(setting, []).append(s)
        self._call_state = {key: ([self._data[s] for s in slots], [self._m[s] for s in slots],
                                  [self._v[s] for s in slots], [self._step_t] * len(slots))
                            for key, slots in self._calls.items()}

    def _per_row(self, i: int, values: list[float]) -> Tensor:
        """``[K·R, 1]``: member k's value on each of its R rows of stacked table ``i``."""
        t = torch.tensor(values, dtype=self.params[i].dtype, device=self.params[i].device)
        return t.repeat_interleave(self.params[i].shape[1]).unsqueeze(1)

    def _holders(self) -> list[Tensor]:
        """The tensors whose gradients a step reads: the stacked parameters (the dense ones),
        or each member's own (in the update's slot order)."""
        if self.leaves is None:
            return [p for i, p in enumerate(self.params) if i not in self.tables]
        return [self.leaves[i][j] for i, j in self._slots]

    def zero_grad(self) -> None:
        for p in self._holders():
            p.grad = None
        for i in self.tables:
            self.params[i].grad = None
        self._rows = None

    def table_rows(self) -> dict[int, Tensor]:
        """Each row-wise table's rows this step's gradient touched (of its flat ``[K·R, d]``
        view), computed once a step (the average brings them up to date before the step)."""
        if self._rows is None:
            self._rows = {}
            for i in self.tables:
                grad = self.params[i].grad
                if grad is None:
                    raise RuntimeError(f"trained table {i} has no gradient: a pack needs "
                                       "every trained parameter in every step")
                self._rows[i] = touched_rows(grad)
        return {i: rows for i, (rows, _) in self._rows.items()}

    def _grads(self) -> list[Tensor]:
        """Every slot's gradient (an error names a trained tensor without one)."""
        holders = self._holders()
        missing = [i for i, p in enumerate(holders) if p.grad is None]
        if missing:
            raise RuntimeError(f"trained tensor {missing[0]} has no gradient: a pack needs "
                               "every trained parameter in every step")
        grads = [p.grad for p in holders if p.grad is not None]
        if self.leaves is not None:
            return grads
        dense = [i for i in range(len(self.params)) if i not in self.tables]
        members = dict(zip(dense, (g.unbind(0) for g in grads), strict=True))
        return [members[i][j] for i, j in self._slots]

    @torch.no_grad()
    def step(self) -> None:
        grads = self._grads()
        self.table_rows()
        self.step_count += 1
        self._step_t += 1  # AdamW's state step, which the fused kernel reads
        if self._slots:
            if self.fused:
                self._fused_step(grads)
            else:
                self._foreach_step(grads)
        self._table_step()

    def _table_step(self) -> None:
        """Every row-wise table's touched rows, each at its member's lr and decay."""
        assert self._rows is not None  # table_rows() ran
        beta1, beta2 = self.betas
        for i, rule in self.tables.items():
            rows, g = self._rows[i]
            lr = self._table_lr[i].index_select(0, rows)
            wd = self._table_wd.get(i)
            decay = 0.0 if wd is None else wd.index_select(0, rows)
            if rule == "rowwise_adagrad":
                rowwise_adagrad_(self.params[i].data, rows, g, self.row_sums[i], lr, self.eps,
                                 decay)
            else:
                lazy_adam_(self.params[i].data, rows, g, self.exp_avg[i], self.exp_avg_sq[i],
                           self.step_count, lr, (beta1, beta2), self.eps, decay)
        self._rows = None

    def _fused_step(self, grads: list[Tensor]) -> None:
        beta1, beta2 = self.betas
        for (lr, wd), slots in self._calls.items():
            params, exp_avgs, exp_avg_sqs, steps = self._call_state[lr, wd]
            torch._fused_adamw_(params, [grads[s] for s in slots], exp_avgs, exp_avg_sqs, [],
                                steps, lr=lr, beta1=beta1, beta2=beta2, weight_decay=wd,
                                eps=self.eps, amsgrad=False, maximize=False)

    def _foreach_step(self, grads: list[Tensor]) -> None:
        """``_multi_tensor_adam`` (decoupled weight decay, not capturable) with a scalar per
        tensor where torch has one per group."""
        beta1, beta2 = self.betas
        params, exp_avgs, exp_avg_sqs = self._data, self._m, self._v
        decayed = [s for s, wd in enumerate(self._wd) if wd != 0]
        if decayed:  # torch skips the op for a group without decay
            torch._foreach_mul_([params[s] for s in decayed],
                                [1 - self._lr[s] * self._wd[s] for s in decayed])
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        bc1 = 1 - beta1 ** float(self.step_count)
        bc2 = 1 - beta2 ** float(self.step_count)
        step_size = [(lr / bc1) * -1 for lr in self._lr]
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bc2 ** 0.5)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)

    def state_dict(self) -> dict:
        return {"step": self.step_count, "exp_avg": [t.clone() for t in self.exp_avg],
                "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
                "row_sums": {i: t.clone() for i, t in self.row_sums.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = int(state["step"])
        self._step_t.fill_(float(self.step_count))
        torch._foreach_copy_(self.exp_avg, state["exp_avg"])
        torch._foreach_copy_(self.exp_avg_sq, state["exp_avg_sq"])
        for i, t in state.get("row_sums", {}).items():
            self.row_sums[i].copy_(t)

"""AdamW over a pack's stacked parameters, each member with its own learning rate and decay.

Why: a pack (:mod:`gemkd.transfer.distill.pack`) trains K copies of one student as tensors
``[K, ...]``; each member must take the update torch's ``AdamW(foreach=True)`` (what
:class:`~gemkd.transfer.training.flat_adamw.FlatAdamW` runs for a single run) would give it at
its own ``lr`` and ``weight_decay``, and torch's AdamW takes one ``lr`` per group. So this keeps
every stacked parameter, gradient and moment in one flat buffer and runs torch's non-capturable
foreach update (``torch.optim.adam._multi_tensor_adam``) on it, op for op, with the two
lr-dependent scalars — the decoupled decay factor ``1 - lr · wd`` and the step size
``-lr / (1 - β1^t)`` — as per-element float32 tensors computed in float64, as torch computes
those Python scalars before its kernels cast them to float32 (once per parameter and member,
then spread over its elements: the step's cost is the update's, not K · P float64 passes over
the buffer). Every op is elementwise, so each
member's values are those of its own run, bit for bit (``tests/training/test_pack_adamw.py``).
β1, β2 and ε are shared by the pack (a member that differs cannot join it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class MemberGroup:
    """One stacked parameter's settings per member: ``lr`` and ``weight_decay`` lists of K."""

    lr: list[float]
    weight_decay: list[float]


class PackAdamW:
    """``params``: stacked tensors ``[K, ...]`` (re-pointed at slices of one buffer);
    ``groups``: each one's per-member settings, in the same order. ``leaves``, when given,
    ``leaves[i][k]`` is member k's own parameter i: re-pointed at slice ``[k]`` of
    ``params[i]``, and the gradients a step reads are theirs (members trained as their own
    modules) rather than the stacked tensors' (a vmapped pack)."""

    def __init__(self, params: list[Tensor], groups: list[MemberGroup], *,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 leaves: Sequence[Sequence[Tensor]] | None = None) -> None:
        if len(params) != len(groups) or not params:
            raise ValueError("PackAdamW needs one MemberGroup per stacked parameter")
        k = params[0].shape[0]
        if any(p.shape[0] != k or len(g.lr) != k or len(g.weight_decay) != k
               for p, g in zip(params, groups, strict=True)):
            raise ValueError(f"every stacked parameter and setting must have {k} members")
        self.params, self.betas, self.eps = list(params), betas, eps
        with torch.no_grad():
            self.data = torch.cat([p.detach().reshape(-1) for p in params])
            offset = 0
            for p in params:
                p.data = self.data[offset:offset + p.numel()].view(p.shape)
                offset += p.numel()
            for p, own in zip(params, leaves or [], strict=False):
                if len(own) != k or any(q.shape != p.shape[1:] for q in own):
                    raise ValueError("leaves: one tensor per member, each of a member's shape")
                for j, q in enumerate(own):
                    q.data = p.data[j]
        self.leaves = leaves
        self.grad = torch.empty_like(self.data)
        self.exp_avg = torch.zeros_like(self.data)
        self.exp_avg_sq = torch.zeros_like(self.data)
        self.step_count = 0

        #: the buffer is runs of one (parameter, member) each: ``_counts`` elements long, and
        #: a setting per run (``[P · K]``, float64) expands to per-element values in one op
        self._counts = torch.tensor([p[0].numel() for p in params for _ in range(k)])
        self._lr = torch.tensor([x for g in groups for x in g.lr], dtype=torch.float64)
        wd = torch.tensor([x for g in groups for x in g.weight_decay], dtype=torch.float64)
        #: torch skips the decay when a group's weight_decay is 0; x · 1.0 is x
        self._decay = None if not bool(wd.any()) else self._per_element((1 - self._lr * wd)
                                                                        .float())

    def _per_element(self, values: Tensor) -> Tensor:
        """One value per run of the buffer (``[P · K]``) as one per element: every element
        of a run gets its run's value (a 0-dim tensor when all runs share one, which the
        elementwise ops broadcast to the same float32 products)."""
        if bool((values == values[0]).all()):
            return values[0].clone()
        return values.repeat_interleave(self._counts, output_size=self.data.numel())

    def _holders(self) -> list[Tensor]:
        """The tensors whose gradients a step reads, in the buffer's order."""
        if self.leaves is None:
            return self.params
        return [q for own in self.leaves for q in own]

    def zero_grad(self) -> None:
        for p in self._holders():
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        holders = self._holders()
        missing = [i for i, p in enumerate(holders) if p.grad is None]
        if missing:
            raise RuntimeError(f"trained tensor {missing[0]} has no gradient: a pack needs "
                               "every trained parameter in every step")
        torch.cat([g.reshape(-1) for p in holders if (g := p.grad) is not None], out=self.grad)
        self.step_count += 1
        beta1, beta2 = self.betas
        data, grad, exp_avg, exp_avg_sq = self.data, self.grad, self.exp_avg, self.exp_avg_sq
        if self._decay is not None:
            data.mul_(self._decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2)
        exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)
        bc1 = 1 - beta1 ** float(self.step_count)
        bc2 = 1 - beta2 ** float(self.step_count)
        # each run's -lr / bc1 in float64, cast to float32 (as torch's Python scalar is),
        # then spread over its run: the per-element values of computing it per element
        step_size = exp_avg * self._per_element(((self._lr / bc1) * -1).float())
        denom = exp_avg_sq.sqrt()
        denom.div_(bc2 ** 0.5)
        denom.add_(self.eps)
        # addcdiv's kernel: self + value * t1 / t2, evaluated left to right
        data.add_(step_size.div_(denom))

    def state_dict(self) -> dict:
        return {"step": self.step_count, "exp_avg": self.exp_avg.clone(),
                "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = int(state["step"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])

"""AdamW whose parameter groups each live in one contiguous buffer.

Why: on the CPU every ``torch._foreach_*`` op loops over its tensors, one kernel each. A small
student has ~14 parameter tensors, the Student Adapter, the auxiliary head and the
representation features add ~11 more, so torch's foreach AdamW step ran ~12 ops × 25 tensors:
0.26 ms of a labels-only step and 0.67 ms of the ``full`` variant's, against ~0.1 ms for the same
arithmetic on one buffer per group (``benchmarks/bench_transfer.py`` shows the epochs). torch's
``fused=True`` AdamW is no faster per tensor on the CPU and rounds differently; FSDP's flat
parameter is for sharding. So this keeps torch's own update (``torch.optim.adam.adam``, foreach)
and changes only the layout: each eligible group's parameters are re-pointed (``.data``) at slices
of one buffer, their Adam moments are slices of two more, all share one step count, and a step
gathers the gradients into one buffer (one ``cat``) and runs torch's update on the three
buffers. The update is elementwise, so every parameter takes the same values, bit for bit, as
under ``torch.optim.AdamW(foreach=True)`` (``tests/transfer/training/test_flat_adamw.py``).

Per parameter, the optimiser's state stays torch's: ``state[p]`` holds ``step`` (the group's
shared count), ``exp_avg`` and ``exp_avg_sq`` (views of the group's buffers), so
``state_dict``/``load_state_dict`` and checkpoints are those of ``AdamW``. A group takes the flat
path only when it can give torch's results: plain dense tensors of one device and dtype, AdamW
without amsgrad, capturable, differentiable or fused. A group with a ``table_rule`` of
:data:`~gemkd.transfer.training.table_optim.ROW_RULES` (embedding tables with row-sparse
gradients) is updated row-wise instead (:func:`~gemkd.transfer.training.table_optim.table_step`):
one optimiser, as Lightning's automatic optimisation takes, for tables and dense weights.
Anything else runs torch's per-parameter
step unchanged; so does a flat group from the first step on which one of its parameters has no
gradient (torch then leaves that parameter and its state alone), for the rest of the run: its
step counts are un-shared first, so from there on it is exactly torch's path. A parameter whose
storage was replaced (``module.to``, a loaded state) is re-flattened before the step.

The gradient-norm clip runs on the same buffers (:meth:`FlatAdamW.clip_grad_norm_`): the
gradients are gathered once, before the clip instead of in the step, and each flat group's norm is
one reduction over its buffer and its scaling one multiply, where torch's ``clip_grad_norm_``
takes a norm and a multiply per tensor (on the CPU, where torch has no multi-tensor kernels,
~6 ops a parameter: 1,082 of a GEM teacher step's 7,196). The total norm is the norm of the
groups' norms, not of the tensors' norms, so it differs from torch's in the last bits, and the
scaled gradients by as much as the coefficient does
(``tests/transfer/training/test_flat_clip.py`` bounds both by the roundoff of the two sums).
After the gather each parameter's ``.grad`` is a view of its group's buffer, so what the clip
scaled is what a reader of ``.grad`` sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.optim.adam import adam
from torch.optim.optimizer import _get_scalar_dtype

from gemkd.transfer.training.table_optim import (
    ROW_RULES,
    clip_tensors_,
    grads_to_clip,
    table_step,
)

#: group keys that are not settings (two groups with equal settings can share one buffer)
_NOT_SETTINGS = ("params", "name")


@dataclass
class _FlatGroup:
    """One group's buffers: the parameters (``data``), their gathered gradients (``grad``) and,
    from the first step, the moments and the shared step count."""

    params: list[Tensor]
    ptrs: list[int]
    data: Tensor
    grad: Tensor
    #: one view of ``grad`` per parameter, which a gathered parameter's ``.grad`` is
    grad_views: list[Tensor]
    exp_avg: Tensor | None = None
    exp_avg_sq: Tensor | None = None
    step: Tensor | None = None


def _same_layout(flat: _FlatGroup, params: list[Tensor]) -> bool:
    """Whether ``params`` are still the flattened parameters, each still on its slice."""
    return len(params) == len(flat.params) and all(
        p is q and p.data_ptr() == ptr for p, q, ptr in zip(params, flat.params, flat.ptrs,
                                                           strict=True))


def _views(buffer: Tensor, params: list[Tensor]) -> list[Tensor]:
    """Consecutive slices of the flat ``buffer``, one per parameter, in its shape."""
    sizes = [p.numel() for p in params]
    return [part.view(p.shape) for part, p in zip(buffer.split(sizes), params, strict=True)]


def _settings(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k not in _NOT_SETTINGS}


class FlatAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW(foreach=True)`` with each group's parameters, gradients and moments in
    one buffer (module doc). ``merge_equal_groups``: a group added with the same settings as an
    earlier one (all keys but ``params`` and ``name``, defaults filled in) joins it — each
    parameter's update is the same either way, one buffer costs a step less than two."""

    def __init__(self, params: Iterable[Any], *, merge_equal_groups: bool = False,
                 **kwargs: Any) -> None:
        #: whether a group added later with an earlier group's settings joins that group
        self.merge_equal_groups = merge_equal_groups
        self._flat: dict[int, _FlatGroup] = {}  # id(group) -> its buffers
        #: ``hook(param, rows)`` before a row-wise table's rows change (table_optim.table_step)
        self.row_hooks: list[Callable[[Tensor, Tensor], None]] = []
        kwargs.setdefault("foreach", True)
        super().__init__(params, **kwargs)

    # ------------------------------------------------------------------ layout
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)  # torch checks the group and fills in defaults
        new = self.param_groups[-1]
        if self.merge_equal_groups:
            for earlier in self.param_groups[:-1]:
                if _settings(earlier) == _settings(new):
                    earlier["params"].extend(new["params"])
                    self.param_groups.pop()
                    self._flatten(earlier)
                    return
        self._flatten(new)

    def _eligible(self, group: dict[str, Any]) -> bool:
        params = group["params"]
        if group.get("table_rule") in ROW_RULES:
            return False
        if not params or group["amsgrad"] or group["capturable"] or group["differentiable"] \
                or group["fused"] or group["foreach"] is False:
            return False
        first = params[0]
        return all(type(p.data) is Tensor and not p.is_sparse and p.is_floating_point()
                   and not p.is_complex() and p.device == first.device
                   and p.dtype == first.dtype for p in params)

    def _flatten(self, group: dict[str, Any]) -> None:
        """Move ``group``'s parameters (and their moments, if any) into one buffer each; leave
        the group on torch's path when it is not eligible or its parameters' step counts
        differ."""
        self._flat.pop(id(group), None)
        if not self._eligible(group):
            return
        params = group["params"]
        states = [self.state.get(p) for p in params]
        started = [s for s in states if s]
        if started and (len(started) < len(params)
                         or len({float(s["step"]) for s in started}) != 1):
            return
        with torch.no_grad():
            data = torch.cat([p.detach().reshape(-1) for p in params])
            grad = torch.empty_like(data)
            flat = _FlatGroup(params=list(params), ptrs=[], data=data, grad=grad,
                              grad_views=_views(grad, params))
            if started:
                flat.exp_avg = torch.cat([s["exp_avg"].reshape(-1).to(data) for s in started])
                flat.exp_avg_sq = torch.cat([s["exp_avg_sq"].reshape(-1).to(data)
                                             for s in started])
                flat.step = started[0]["step"].clone()  # not shared with a loaded dict
            for p, view in zip(params, _views(data, params), strict=True):
                p.data = view
            flat.ptrs = [p.data_ptr() for p in params]
            if started:
                self._point_state(flat)
        self._flat[id(group)] = flat

    def _point_state(self, flat: _FlatGroup) -> None:
        """Each parameter's state: the shared step count and views of the moments' buffers."""
        assert flat.exp_avg is not None and flat.exp_avg_sq is not None  # the caller set them
        moments = zip(_views(flat.exp_avg, flat.params), _views(flat.exp_avg_sq, flat.params),
                      strict=True)
        for p, (exp_avg, exp_avg_sq) in zip(flat.params, moments, strict=True):
            self.state[p] = {"step": flat.step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    def _unflatten(self, group: dict[str, Any]) -> None:
        """Hand ``group`` to torch's path for good: each parameter its own step count (the
        moments may stay views: torch updates them in place)."""
        flat = self._flat.pop(id(group))
        for p in flat.params:
            if p in self.state and "step" in self.state[p]:
                self.state[p]["step"] = self.state[p]["step"].clone()

    def state_dict(self) -> dict[str, Any]:
        """torch's, each parameter with a step count of its own (a loader that updates them one
        by one, torch's AdamW, must not count a shared one several times)."""
        out = super().state_dict()
        out["state"] = {k: {**v, "step": v["step"].clone()} if "step" in v else v
                        for k, v in out["state"].items()}
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # new group dicts and state tensors
        self._flat = {}
        for group in self.param_groups:
            self._flatten(group)

    # ------------------------------------------------------------------ gradients
    def _current_flat(self, group: dict[str, Any]) -> _FlatGroup | None:
        """``group``'s buffers, re-made first if its parameters were added to or their storage
        replaced; None for a group on torch's path."""
        flat = self._flat.get(id(group))
        if flat is not None and not _same_layout(flat, group["params"]):
            self._flatten(group)
            flat = self._flat.get(id(group))
        return flat

    @staticmethod
    def _gather(flat: _FlatGroup) -> None:
        """Copy the gradients into the group's buffer (one ``cat``) and point each ``.grad`` at
        its view, unless they are the views already (gathered by the clip, or accumulated in
        place into them)."""
        grads = [p.grad for p in flat.params]
        if all(g is v for g, v in zip(grads, flat.grad_views, strict=True)):
            return
        # view, not reshape, where it can: reshape dispatches a view inside it, so the gather's
        # op count halves (the same values: a contiguous grad's view is its reshape)
        torch.cat([g.view(-1) if g.is_contiguous() else g.reshape(-1)
                   for g in grads if g is not None], out=flat.grad)
        for p, view in zip(flat.params, flat.grad_views, strict=True):
            p.grad = view

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> Tensor:
        """Scale every gradient by ``min(1, max_norm / (total + 1e-6))`` as torch's
        ``clip_grad_norm_`` does, where ``total`` is the ``norm_type``-norm of all gradients:
        one norm and one multiply per flat group (module doc), torch's per tensor elsewhere
        (row-sparse table gradients coalesced first: a row looked up twice counts once).
        Returns the total norm."""
        tensors: list[Tensor] = []
        for group in self.param_groups:
            flat = self._current_flat(group)
            if flat is not None and all(p.grad is not None for p in flat.params):
                self._gather(flat)
                tensors.append(flat.grad)
            else:
                tensors += grads_to_clip(group["params"])
        return clip_tensors_(tensors, max_norm, norm_type)

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        if self.defaults["differentiable"]:  # never flat; torch's step keeps the graph
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            flat = self._current_flat(group)
            if flat is not None and any(p.grad is None for p in flat.params):
                self._unflatten(group)
                flat = None
            if group.get("table_rule") in ROW_RULES:
                table_step(self, group)
            elif flat is None:
                self._torch_step(group)
            else:
                self._flat_step(group, flat)
        return loss

    def _flat_step(self, group: dict[str, Any], flat: _FlatGroup) -> None:
        # step() hands a group here only when every parameter has a gradient
        self._gather(flat)
        if flat.step is None:  # torch's lazy state: step 0, zero moments
            flat.step = torch.tensor(0.0, dtype=_get_scalar_dtype())
            flat.exp_avg = torch.zeros_like(flat.data)
            flat.exp_avg_sq = torch.zeros_like(flat.data)
            self._point_state(flat)
        assert flat.exp_avg is not None and flat.exp_avg_sq is not None  # set on the first step
        beta1, beta2 = group["betas"]
        adam([flat.data], [flat.grad], [flat.exp_avg], [flat.exp_avg_sq], [], [flat.step],
             foreach=True, amsgrad=False, has_complex=False, beta1=beta1, beta2=beta2,
             lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
             maximize=group["maximize"], capturable=False, differentiable=False, fused=None,
             grad_scale=getattr(self, "grad_scale", None),
             found_inf=getattr(self, "found_inf", None),
             decoupled_weight_decay=group["decoupled_weight_decay"])

    def _torch_step(self, group: dict[str, Any]) -> None:
        """``torch.optim.AdamW.step``'s body for one group."""
        params: list[Tensor] = []
        grads: list[Tensor] = []
        exp_avgs: list[Tensor] = []
        exp_avg_sqs: list[Tensor] = []
        max_sqs: list[Tensor] = []
        steps: list[Tensor] = []
        beta1, beta2 = group["betas"]
        has_complex = self._init_group(group, params, grads, exp_avgs, exp_avg_sqs, max_sqs,
                                       steps)
        adam(params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, amsgrad=group["amsgrad"],
             has_complex=has_complex, beta1=beta1, beta2=beta2, lr=group["lr"],
             weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
             foreach=group["foreach"], capturable=group["capturable"],
             differentiable=group["differentiable"], fused=group["fused"],
             grad_scale=getattr(self, "grad_scale", None),
             found_inf=getattr(self, "found_inf", None),
             decoupled_weight_decay=group["decoupled_weight_decay"])

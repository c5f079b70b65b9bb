"""FlatAdamW gives torch's AdamW(foreach=True) bit for bit, with each group in one buffer."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from gemkd.transfer.training.flat_adamw import FlatAdamW

SHAPES = [(50, 8), (3, 8), (16, 21), (16,), (2, 16), (2,)]


def _params(seed: int = 0) -> list[nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]


def _groups(params: list[nn.Parameter]) -> list[dict]:
    return [{"name": "embedding", "params": params[:2], "lr": 0.05, "weight_decay": 0.0},
            {"name": "dense", "params": params[2:], "lr": 0.01, "weight_decay": 0.1}]


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(s, generator=g) for s in SHAPES]


def _run(opt: torch.optim.Optimizer, params: list[nn.Parameter], steps: range,
         skip: dict[int, int] | None = None) -> None:
    """``steps`` optimiser steps with the same gradients for every optimiser; at step ``k`` of
    ``skip`` parameter ``skip[k]`` has no gradient."""
    for k in steps:
        opt.zero_grad()
        for i, (p, g) in enumerate(zip(params, _grads(k), strict=True)):
            if not (skip and skip.get(k) == i):
                p.grad = g.clone()
        opt.step()


def _equal(a: list[nn.Parameter], b: list[nn.Parameter]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _side_by_side(steps: range, skip: dict[int, int] | None = None, **kwargs):
    """torch's AdamW and FlatAdamW (both with ``kwargs``) on equal parameters, ``steps`` run on
    each: ``(ref, torch_opt, flat, opt)``."""
    ref, flat = _params(), _params()
    torch_opt = torch.optim.AdamW(_groups(ref), lr=0.01, **{"foreach": True, **kwargs})
    opt = FlatAdamW(_groups(flat), lr=0.01, **kwargs)
    _run(torch_opt, ref, steps, skip)
    _run(opt, flat, steps, skip)
    return ref, torch_opt, flat, opt


def test_bit_identical_to_torch_adamw_and_one_buffer_per_group():
    ref, torch_opt, flat, opt = _side_by_side(range(20))
    assert _equal(ref, flat)
    for group in opt.param_groups:  # the group's parameters are consecutive slices of one buffer
        ps = group["params"]
        base = ps[0].untyped_storage().data_ptr()
        assert all(p.untyped_storage().data_ptr() == base for p in ps)
        assert all(a.data_ptr() + a.numel() * a.element_size() == b.data_ptr()
                   for a, b in zip(ps, ps[1:], strict=False))
    for p, q in zip(ref, flat, strict=True):  # torch's per-parameter state, same values
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(torch_opt.state[p][key], opt.state[q][key]), key


def test_missing_gradient_leaves_the_parameter_alone_as_torch_does():
    # a dense weight has no gradient at step 3, an embedding at step 7
    ref, _, flat, opt = _side_by_side(range(12), skip={3: 4, 7: 0})
    assert _equal(ref, flat)
    assert float(opt.state[flat[4]]["step"]) == 11 and float(opt.state[flat[3]]["step"]) == 12


def _saved(opt: torch.optim.Optimizer) -> dict:
    """``opt``'s state dict through a checkpoint file's bytes."""
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_state_dict_round_trips_with_torch_adamw():
    ref, torch_opt, flat, opt = _side_by_side(range(5))
    # FlatAdamW's checkpoint continues in torch's AdamW, and torch's in FlatAdamW
    resumed_torch, resumed_flat = [p.detach().clone().requires_grad_() for p in flat], _params(9)
    with torch.no_grad():
        for p, q in zip(resumed_flat, ref, strict=True):
            p.copy_(q)
    opt_t = torch.optim.AdamW(_groups(resumed_torch), lr=0.01, foreach=True)
    opt_t.load_state_dict(_saved(opt))
    opt_f = FlatAdamW(_groups(resumed_flat), lr=0.01)
    opt_f.load_state_dict(_saved(torch_opt))
    _run(torch_opt, ref, range(5, 10))
    _run(opt_t, resumed_torch, range(5, 10))
    _run(opt_f, resumed_flat, range(5, 10))
    assert _equal(ref, resumed_torch) and _equal(ref, resumed_flat)


def test_replaced_storage_is_flattened_again():
    ref, torch_opt, flat, opt = _side_by_side(range(3))
    flat[2].data = flat[2].data.clone()  # what module.to(...) does to a parameter
    _run(torch_opt, ref, range(3, 6))
    _run(opt, flat, range(3, 6))
    assert _equal(ref, flat)
    assert flat[2].untyped_storage().data_ptr() == flat[3].untyped_storage().data_ptr()


def test_merge_equal_groups():
    ref, flat = _params(), _params()
    opt = FlatAdamW(_groups(flat)[:1], lr=0.01, merge_equal_groups=True)
    opt.add_param_group({"name": "emb2", "params": [flat[2]], "lr": 0.05, "weight_decay": 0.0})
    opt.add_param_group({"name": "dense", "params": flat[3:], "lr": 0.01, "weight_decay": 0.1})
    assert [g["name"] for g in opt.param_groups] == ["embedding", "dense"]
    assert len(opt.param_groups[0]["params"]) == 3
    # the reference: flat[2] moved to the embedding group's settings
    torch_opt = torch.optim.AdamW(
        [{"params": ref[:3], "lr": 0.05, "weight_decay": 0.0},
         {"params": ref[3:], "lr": 0.01, "weight_decay": 0.1}], lr=0.01, foreach=True)
    _run(torch_opt, ref, range(8))
    _run(opt, flat, range(8))
    assert _equal(ref, flat)


@pytest.mark.parametrize("kwargs", [{"amsgrad": True}, {"foreach": False}])
def test_ineligible_groups_take_torch_path(kwargs):
    ref, _, flat, _ = _side_by_side(range(6), **kwargs)
    assert _equal(ref, flat)
    assert flat[0].untyped_storage().data_ptr() != flat[1].untyped_storage().data_ptr()

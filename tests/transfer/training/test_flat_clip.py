"""FlatAdamW's gradient-norm clip on its flat buffers: torch's clip up to the rounding of one
norm, one norm and one multiply a group, and the gradients gathered once for clip and step.

The tolerance comes from the numerics: torch sums squares tensor by tensor and then the squares
of the tensors' norms, the flat clip sums a group's squares in one reduction; both are cascade
sums in float32, whose relative error is at most ~ceil(log2 n) units of roundoff (u = 2^-24) for
n terms, so the two total norms agree to that and each clipped gradient to that plus the two
roundings of its multiply and the coefficient's division.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from gemkd.transfer.training.flat_adamw import FlatAdamW
from gemkd.transfer.training.table_optim import clip_grad_norm_ as table_clip

SHAPES = [(500, 16), (30, 16), (160, 21), (160,), (20, 160), (20,), (7, 7, 3)]
U = 2.0 ** -24


def _params(seed: int = 0) -> list[nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]


def _groups(params: list[nn.Parameter]) -> list[dict]:
    return [{"params": params[:2], "lr": 0.05, "weight_decay": 0.0},
            {"params": params[2:], "lr": 0.01, "weight_decay": 0.1}]


def _set_grads(params: list[nn.Parameter], step: int, scale: float) -> None:
    g = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * scale


def _tol() -> float:
    n = sum(math.prod(s) for s in SHAPES)
    return (math.ceil(math.log2(n)) + 3) * U


def test_total_norm_and_clipped_grads_agree_with_torch_to_the_roundoff_bound():
    ref, flat = _params(), _params()
    opt = FlatAdamW(_groups(flat), lr=0.01)
    _set_grads(ref, 0, 3.0)
    _set_grads(flat, 0, 3.0)
    n_ref = torch.nn.utils.clip_grad_norm_(ref, 1.0)
    n_flat = opt.clip_grad_norm_(1.0)
    assert n_ref > 1.0  # it clips
    assert abs(float(n_flat) / float(n_ref) - 1) <= _tol()
    for r, f in zip(ref, flat, strict=True):
        assert torch.allclose(f.grad, r.grad, rtol=_tol(), atol=0)
    # the clip scaled the buffer the step reads, and .grad is its view
    for group in opt.param_groups:
        buffer = opt._flat[id(group)].grad
        for p in group["params"]:
            assert p.grad.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()


def _clip_and_step(steps: int, scale: float, max_norm: float):
    """torch's clip and AdamW on one copy of the parameters, FlatAdamW's on another, the same
    gradients (``scale`` × a fixed draw per step) for ``steps`` steps: ``(ref, flat)``."""
    ref, flat = _params(), _params()
    torch_opt = torch.optim.AdamW(_groups(ref), lr=0.01, foreach=True)
    opt = FlatAdamW(_groups(flat), lr=0.01)
    for k in range(steps):
        torch_opt.zero_grad()
        opt.zero_grad()
        _set_grads(ref, k, scale)
        _set_grads(flat, k, scale)
        torch.nn.utils.clip_grad_norm_(ref, max_norm)
        opt.clip_grad_norm_(max_norm)
        torch_opt.step()
        opt.step()
    return ref, flat


def test_no_clip_leaves_the_step_bit_identical_to_torch():
    """Under the threshold the coefficient is exactly 1: clip + step is torch's, bit for bit."""
    ref, flat = _clip_and_step(5, 1e-3, 1e6)
    assert all(torch.equal(a, b) for a, b in zip(ref, flat, strict=True))


def test_clipped_training_tracks_torch_within_the_bound_per_step():
    ref, flat = _clip_and_step(3, 3.0, 1.0)
    # Adam divides the moment by its root: a gradient's relative error reaches the update at
    # most once per step, on parameters of order 1 moved by lr 0.01 a step
    for a, b in zip(ref, flat, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=3 * 0.05 * 4 * _tol() + 4 * U)


def test_one_norm_a_group_and_the_step_does_not_gather_again():
    flat = _params()
    opt = FlatAdamW(_groups(flat), lr=0.01)
    _set_grads(flat, 0, 3.0)
    with profile(activities=[ProfilerActivity.CPU]) as clip:
        opt.clip_grad_norm_(1.0)
    with profile(activities=[ProfilerActivity.CPU]) as step:
        opt.step()
    clip_ops = [e.name for e in clip.events()]
    # two groups' norms plus the norm of the two; one multiply a group
    assert clip_ops.count("aten::linalg_vector_norm") == 3
    assert clip_ops.count("aten::mul_") == 2
    # the step finds the gradients in the buffers the clip gathered them into
    assert "aten::cat" not in [e.name for e in step.events()]


def test_row_sparse_table_beside_flat_groups_matches_the_table_clip():
    g = torch.Generator().manual_seed(0)
    table_a = nn.Embedding(50, 8, sparse=True)
    table_b = nn.Embedding(50, 8, sparse=True)
    table_b.weight.data.copy_(table_a.weight.data)
    dense_a, dense_b = _params(1), _params(1)
    ids = torch.randint(0, 50, (40,), generator=g)
    for table, dense in ((table_a, dense_a), (table_b, dense_b)):
        table(ids).sum().backward()
        _set_grads(dense, 0, 3.0)
    opt = FlatAdamW([{"params": [table_b.weight], "table_rule": "sparse_adam", "lr": 0.1},
                     *_groups(dense_b)], lr=0.01)
    n_table = table_clip([table_a.weight, *dense_a], 1.0)
    n_flat = opt.clip_grad_norm_(1.0)
    assert abs(float(n_flat) / float(n_table) - 1) <= _tol()
    assert torch.allclose(table_b.weight.grad.to_dense(), table_a.weight.grad.to_dense(),
                          rtol=_tol(), atol=0)
    for a, b in zip(dense_a, dense_b, strict=True):
        assert torch.allclose(b.grad, a.grad, rtol=_tol(), atol=0)

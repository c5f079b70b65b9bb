"""A batched pack's per-member knob (a float64 0-dim tensor) weights a loss as the Python float
of a run alone does: same dtype, same bits, forward and gradient."""

from __future__ import annotations

import torch

from gemkd.transfer.methods.kd import _scaled


def test_a_tensor_weight_scales_a_scalar_loss_as_a_float_does():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, generator=g)
    for w in (0.3, 0.7, 1.0 - 0.3, 2.0, 1.0, 0.0):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        as_float = _scaled(w, a.sigmoid().mean())
        as_tensor = _scaled(torch.tensor(w, dtype=torch.float64), b.sigmoid().mean())
        assert as_tensor.dtype == as_float.dtype == torch.float32
        assert torch.equal(as_tensor, as_float), w
        as_float.backward()
        as_tensor.backward()
        assert torch.equal(a.grad, b.grad), w

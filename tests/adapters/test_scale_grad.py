"""scale_grad: identity forward, gradient × β exactly (what the auxiliary head's trunk gets)."""

from __future__ import annotations

import torch

from gemkd.adapters import scale_grad


def test_gradient_is_the_product_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    x0, w = torch.randn(64, 8, generator=g), torch.randn(8, 3, generator=g)
    for beta in (0.37, 2.5, 1.0, 0.0):
        a, b = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        out = scale_grad(a, beta)
        assert torch.equal(out, a)
        (out @ w).tanh().sum().backward()
        (b @ w).tanh().sum().backward()
        assert torch.equal(a.grad, b.grad * beta), beta


def test_reused_output_scales_the_summed_gradient_once():
    x = torch.ones(3, requires_grad=True)
    y = scale_grad(x, 0.25)
    (y * 2 + y * 6).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_no_graph_forward_is_the_identity():
    with torch.no_grad():
        x = torch.arange(4.0, requires_grad=True)
        y = scale_grad(x, 0.5)
    assert torch.equal(y, x) and y.grad_fn is None


def test_inside_vmap_the_gradient_is_scaled_as_outside():
    # a batched pack vmaps the step: a hook on vmap's wrapper is never called, so scale_grad
    # must scale there by another route (the gradient was left unscaled)
    from torch.func import vmap

    g = torch.Generator().manual_seed(1)
    x0, w = torch.randn(2, 16, 8, generator=g), torch.randn(8, 3, generator=g)
    for beta in (0.37, 2.5, 1.0):
        a = x0.clone().requires_grad_()
        vmap(lambda x, beta=beta: (scale_grad(x, beta) @ w).tanh().sum())(a).sum().backward()
        for k in range(2):
            b = x0[k].clone().requires_grad_()
            (scale_grad(b, beta) @ w).tanh().sum().backward()
            assert torch.allclose(a.grad[k], b.grad), beta

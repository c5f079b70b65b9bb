"""masked_mean: the mean over found rows; an all-true host mask takes ``mean()``, bit for bit."""

from __future__ import annotations

import pytest
import torch

from gemkd.transfer.methods.losses import masked_mean


def _masked_form(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(values.dtype).unsqueeze(-1).expand_as(values)
    return (values * m).sum() / m.sum().clamp_min(1.0)


@pytest.mark.parametrize("shape", [(256, 2), (37, 1), (4096, 5), (1000, 3)])
def test_all_found_is_the_masked_form_bit_for_bit(shape):
    g = torch.Generator().manual_seed(shape[0])
    base = torch.randn(shape, generator=g) * 3
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    mask = torch.ones(shape[0], dtype=torch.bool)
    fast, ref = masked_mean(a.exp(), mask), _masked_form(b.exp(), mask)
    fast.backward()
    ref.backward()
    assert torch.equal(fast, ref) and torch.equal(a.grad, b.grad)


def test_partial_and_empty_masks():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert masked_mean(values, torch.tensor([True, False, True])).item() == pytest.approx(3.5)
    assert masked_mean(values, torch.zeros(3, dtype=torch.bool)).item() == 0.0
    assert masked_mean(values, None).item() == pytest.approx(3.5)

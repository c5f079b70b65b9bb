"""An elementwise op over a stacked pack's tensors, a member at a time: each member's values and
gradients are those of its own ``[1, B, T]`` tensor (a run alone), whatever K and its place."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemkd.transfer.packs.member_wise import member_wise


def _bce(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(x, y.expand_as(x), reduction="none")


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("rows", [37, 232, 256])
def test_each_member_is_its_own_tensor(k, rows):
    g = torch.Generator().manual_seed(rows * 10 + k)
    logits = (3 * torch.randn(k, rows, 1, generator=g)).requires_grad_()
    target = torch.rand(rows, 1, generator=g)  # shared, as a teacher's soft targets
    scale = torch.rand(k, 1, 1, generator=g) + 0.5  # a per-member knob [K, 1, 1]
    out = member_wise(lambda x, y, s: s * _bce(x, y), logits, target, scale)
    assert out.shape == (k, rows, 1)
    (out * torch.arange(1.0, 1 + rows).view(1, rows, 1)).sum().backward()
    for m in range(k):  # the member alone: a pack of one
        alone = logits.detach()[m:m + 1].clone().requires_grad_()
        own = scale[m:m + 1] * _bce(alone, target)
        (own * torch.arange(1.0, 1 + rows).view(1, rows, 1)).sum().backward()
        assert torch.equal(out[m:m + 1].detach(), own.detach())
        assert torch.equal(logits.grad[m:m + 1], alone.grad)


def test_a_run_or_a_pack_of_one_is_the_op_itself():
    x, y = torch.randn(4, 2), torch.rand(4, 2)
    assert torch.equal(member_wise(_bce, x, y), _bce(x, y))
    one = torch.randn(1, 4, 2)
    assert torch.equal(member_wise(_bce, one, y), _bce(one, y))

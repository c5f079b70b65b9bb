"""GEM on CUDA (``make test-gpu``): the Triton kernels inside the whole model give the same
logits and gradients as the PyTorch reference ops, and bf16 autocast stays finite."""

from __future__ import annotations

import pytest
import torch

from gemkd.teachers import GEM
from tests.teachers.helpers import TINY, random_batch, tiny_schema

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _run(kernel: str, fused_lookup: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    schema = tiny_schema()
    torch.manual_seed(0)
    model = GEM(schema, **{**TINY, "kernel": kernel, "fused_lookup": fused_lookup}).cuda()
    batch = random_batch(schema, b=256, seed=3, long_len=3000).to("cuda")
    logits = model(batch).logits
    logits.float().square().mean().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("fused_lookup", [False, True])
def test_triton_model_matches_reference(fused_lookup):
    ref_logits, ref_grads = _run("torch", fused_lookup)
    tri_logits, tri_grads = _run("triton", fused_lookup)
    torch.testing.assert_close(tri_logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert ref_grads.keys() == tri_grads.keys()
    for name, g in ref_grads.items():
        torch.testing.assert_close(tri_grads[name], g, rtol=1e-3, atol=1e-4, msg=name)


def test_bf16_autocast_on_cuda_is_finite():
    schema = tiny_schema()
    torch.manual_seed(0)
    model = GEM(schema, **{**TINY, "kernel": "auto"}).cuda()
    batch = random_batch(schema, b=128, seed=4).to("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(batch).logits
    out.float().mean().backward()
    assert torch.isfinite(out.float()).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

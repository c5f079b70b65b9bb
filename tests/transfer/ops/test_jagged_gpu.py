"""Triton kernels vs the PyTorch reference on CUDA at realistic sizes (``make test-gpu``).

B=512 sequences of D=64 features with heavy-tailed lengths (lognormal, mean ~100, one segment of
4000, some empty), forward and backward, in float32, float16 and bfloat16.
"""

from __future__ import annotations

import math

import pytest
import torch

from gemkd.transfer import ops

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEVICE = "cuda"
B, D, DV, MAX_LEN = 512, 64, 32, 4000
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def heavy_tailed_offsets(b: int, max_len: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.empty(b).log_normal_(math.log(100) - 0.5, 1.0, generator=g)
    lengths = lengths.round().clamp(0, max_len).long()
    lengths[0], lengths[1], lengths[-1] = max_len, 0, 0
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


def tol(dtype: torch.dtype) -> dict:
    # float32: different summation orders over up to 4000 terms
    return {
        torch.float32: {"rtol": 1e-4, "atol": 1e-4},
        torch.float16: {"rtol": 5e-3, "atol": 5e-3},
        torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
    }[dtype]


def randn(*shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=DEVICE, dtype=dtype)


def compare(fn, inputs, dtype):
    """Forward + backward of ``fn(*inputs, kernel=...)`` with both kernels, then assert close."""
    results, grad_out = [], None
    for kernel in ("torch", "triton"):
        xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        out = fn(*xs, kernel=kernel)
        if grad_out is None:
            grad_out = randn(*out.shape, dtype=out.dtype, seed=99)
        out.backward(grad_out)
        results.append((out.detach(), [x.grad for x in xs if x.requires_grad]))
    (ref, ref_grads), (tri, tri_grads) = results
    assert tri.dtype == ref.dtype == dtype and tri.shape == ref.shape
    torch.testing.assert_close(tri.float(), ref.float(), **tol(dtype))
    for gt, gr in zip(tri_grads, ref_grads, strict=True):
        assert gt.dtype == gr.dtype
        torch.testing.assert_close(gt.float(), gr.float(), **tol(dtype))


@pytest.fixture(scope="module")
def offsets() -> torch.Tensor:
    return heavy_tailed_offsets(B, MAX_LEN).to(DEVICE)


def n_of(offsets: torch.Tensor) -> int:
    return int(offsets[-1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("how", ["sum", "mean", "max"])
def test_segment_pooling(offsets, how, dtype):
    values = randn(n_of(offsets), D, dtype=dtype, seed=1)
    fn = getattr(ops, f"segment_{how}")
    compare(lambda v, kernel: fn(v, offsets, kernel=kernel), [values], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_padding_round_trip(offsets, dtype):
    n = n_of(offsets)
    values = randn(n, D, dtype=dtype, seed=2)
    compare(
        lambda v, kernel: ops.jagged_to_padded(v, offsets, MAX_LEN, -1.0, kernel=kernel),
        [values],
        dtype,
    )
    # truncating to 128 drops the tail of the long segments; their gradient must be 0
    compare(lambda v, kernel: ops.jagged_to_padded(v, offsets, 128, kernel=kernel), [values], dtype)
    padded = randn(B, 256, D, dtype=dtype, seed=3)
    compare(lambda p, kernel: ops.padded_to_jagged(p, offsets, n, kernel=kernel), [padded], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_target_attention(offsets, dtype):
    n = n_of(offsets)
    q = randn(B, D, dtype=dtype, seed=4) * 2
    k = randn(n, D, dtype=dtype, seed=5)
    v = randn(n, DV, dtype=dtype, seed=6)
    compare(
        lambda q, k, v, kernel: ops.jagged_target_attention(q, k, v, offsets, kernel=kernel),
        [q, k, v],
        dtype,
    )


def test_auto_selects_triton_on_cuda():
    assert ops.select_kernel("auto", torch.device(DEVICE)) == (
        "triton" if ops.triton_available() else "torch"
    )


def test_triton_path_never_syncs(offsets):
    """Forward and backward of every op launch without a host synchronisation."""
    if not ops.triton_available():
        pytest.skip("triton is not installed")
    n = n_of(offsets)
    v = randn(n, D, dtype=torch.bfloat16, seed=7).requires_grad_()
    q = randn(B, D, dtype=torch.bfloat16, seed=8).requires_grad_()

    def step():
        outs = [
            ops.segment_sum(v, offsets, kernel="triton"),
            ops.segment_mean(v, offsets, kernel="triton"),
            ops.segment_max(v, offsets, kernel="triton"),
            ops.jagged_to_padded(v, offsets, 512, kernel="triton").sum(1),
            ops.jagged_target_attention(q, v, v, offsets, kernel="triton"),
        ]
        torch.stack(outs).sum().backward()

    step()  # compiles the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert v.grad is not None and q.grad is not None

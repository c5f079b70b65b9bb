"""The PyTorch reference jagged ops against naive per-segment Python loops."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gemkd.transfer import ops
from gemkd.transfer.ops import jagged_reference as reference

# lengths per segment: empty segments, one huge segment, B=1, N=0, B=0
CASES = {
    "mixed": [3, 0, 5, 1, 0, 2],
    "huge": [2, 300, 0, 1],
    "single": [7],
    "all_empty": [0, 0, 0],
    "no_segments": [],
}


def offsets_of(lengths: list[int]) -> torch.Tensor:
    off = [0]
    for n in lengths:
        off.append(off[-1] + n)
    return torch.tensor(off, dtype=torch.int64)


def segments(x: torch.Tensor, offsets: torch.Tensor) -> list[torch.Tensor]:
    off = offsets.tolist()
    return [x[a:b] for a, b in zip(off[:-1], off[1:], strict=True)]


def naive_pool(values: torch.Tensor, offsets: torch.Tensor, how: str) -> torch.Tensor:
    tail = values.shape[1:]
    out = []
    for seg in segments(values.double(), offsets):
        if seg.shape[0] == 0:
            out.append(torch.zeros(tail, dtype=torch.float64))
        elif how == "sum":
            out.append(seg.sum(0))
        elif how == "mean":
            out.append(seg.mean(0))
        else:
            out.append(seg.max(0).values)
    return torch.stack(out) if out else torch.zeros((0, *tail), dtype=torch.float64)


def naive_padded(values, offsets, max_len, pad):
    b = offsets.shape[0] - 1
    out = torch.full((b, max_len, *values.shape[1:]), pad, dtype=values.dtype)
    for i, seg in enumerate(segments(values, offsets)):
        k = min(seg.shape[0], max_len)
        out[i, :k] = seg[:k]
    return out


def naive_attention(q, k, v, offsets, scale):
    out = []
    for i, (ks, vs) in enumerate(
        zip(segments(k.double(), offsets), segments(v.double(), offsets), strict=True)
    ):
        if ks.shape[0] == 0:
            out.append(torch.zeros(v.shape[1], dtype=torch.float64))
            continue
        w = torch.softmax(ks @ q[i].double() * scale, dim=0)
        out.append(w @ vs)
    return torch.stack(out) if out else torch.zeros((0, v.shape[1]), dtype=torch.float64)


def _data(lengths, d=4, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    return torch.randn(n, d, generator=g).to(dtype), off


# ------------------------------------------------------------------------------ forward values


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("how", ["sum", "mean", "max"])
@pytest.mark.parametrize("dim", [1, 2])
def test_segment_pooling_matches_loop(case, how, dim):
    values, off = _data(CASES[case])
    if dim == 1:
        values = values[:, 0].contiguous()
    got = getattr(ops, f"segment_{how}")(values, off, kernel="torch")
    want = naive_pool(values, off, how)
    assert got.dtype == values.dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("max_len", [0, 1, 4, 301])
@pytest.mark.parametrize("dim", [1, 2])
def test_jagged_to_padded_matches_loop(case, max_len, dim):
    values, off = _data(CASES[case])
    if dim == 1:
        values = values[:, 0].contiguous()
    got = ops.jagged_to_padded(values, off, max_len, -7.0, kernel="torch")
    torch.testing.assert_close(got, naive_padded(values, off, max_len, -7.0))
    # the inverse keeps the first max_len values of each segment and zeros the rest
    back = ops.padded_to_jagged(got, off, values.shape[0], kernel="torch")
    want = torch.cat(
        [torch.cat([s[:max_len], torch.zeros_like(s[max_len:])]) for s in segments(values, off)]
        or [values[:0]]
    )
    torch.testing.assert_close(back, want)


def test_padded_to_jagged_infers_total_len():
    values, off = _data([2, 0, 3])
    padded = ops.jagged_to_padded(values, off, 3)
    torch.testing.assert_close(ops.padded_to_jagged(padded, off), values)


def test_jagged_to_padded_integer_ids():
    ids = torch.tensor([5, 6, 7, 8, 9], dtype=torch.int64)
    off = offsets_of([2, 0, 3])
    got = ops.jagged_to_padded(ids, off, 3, padding_value=-1)
    assert got.dtype == torch.int64
    assert got.tolist() == [[5, 6, -1], [-1, -1, -1], [7, 8, 9]]


@pytest.mark.parametrize("case", CASES)
def test_lengths_to_mask(case):
    off = offsets_of(CASES[case])
    mask = ops.lengths_to_mask(off, 5)
    want = [[p < n for p in range(5)] for n in CASES[case]]
    assert mask.dtype == torch.bool and mask.tolist() == want


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scale", [None, 0.3])
def test_target_attention_matches_loop(case, scale):
    keys, off = _data(CASES[case], d=4, seed=1)
    values, _ = _data(CASES[case], d=3, seed=2)
    query = torch.randn(len(CASES[case]), 4, generator=torch.Generator().manual_seed(3))
    got = ops.jagged_target_attention(query, keys, values, off, scale, kernel="torch")
    want = naive_attention(query, keys, values, off, 0.5 if scale is None else scale)
    assert got.shape == want.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def test_target_attention_is_stable_for_huge_logits():
    keys, off = _data([4, 0, 50], d=8, seed=4)
    values, _ = _data([4, 0, 50], d=2, seed=5)
    query = torch.randn(3, 8) * 1e3  # logits ~1e3: a naive exp overflows
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q, k, v = (x.to(dtype) for x in (query, keys, values))
        got = ops.jagged_target_attention(q, k, v, off, kernel="torch")
        assert got.dtype == dtype and torch.isfinite(got).all()
        want = naive_attention(q.double(), k.double(), v.double(), off, 1 / math.sqrt(8))
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_dtype_preserved(dtype):
    values, off = _data([3, 0, 40], d=4, dtype=dtype)
    for fn in (ops.segment_sum, ops.segment_mean, ops.segment_max):
        out = fn(values, off)
        assert out.dtype == dtype
        want = naive_pool(values, off, fn.__name__.removeprefix("segment_"))
        torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
    assert ops.jagged_to_padded(values, off, 8).dtype == dtype


def test_segment_max_gradient_goes_to_first_argmax():
    values = torch.tensor([[1.0], [3.0], [3.0], [2.0], [5.0]], requires_grad=True)
    off = offsets_of([4, 0, 1])
    out = ops.segment_max(values, off)
    assert out.squeeze(1).tolist() == [3.0, 0.0, 5.0]
    out.sum().backward()
    assert values.grad.squeeze(1).tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=0, max_size=6), st.integers(0, 2**16))
def test_random_lengths_property(lengths, seed):
    values, off = _data(lengths, d=3, seed=seed)
    for how in ("sum", "mean", "max"):
        got = getattr(ops, f"segment_{how}")(values, off)
        torch.testing.assert_close(got.double(), naive_pool(values, off, how), rtol=1e-5, atol=1e-5)
    max_len = max(lengths, default=0)
    padded = ops.jagged_to_padded(values, off, max_len)
    mask = ops.lengths_to_mask(off, max_len)
    # mean via padding + mask (what the benchmark compares against) equals the jagged mean
    masked = (padded * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
    torch.testing.assert_close(masked, ops.segment_mean(values, off), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ops.padded_to_jagged(padded, off, values.shape[0]), values)


# ------------------------------------------------------------------------------ gradients


def _f64(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()


GRAD_LENGTHS = [2, 0, 3, 1]


@pytest.mark.parametrize("name", ["segment_sum", "segment_mean", "segment_max"])
def test_gradcheck_segment_pooling(name):
    off = offsets_of(GRAD_LENGTHS)
    values = _f64(6, 2)
    fn = getattr(ops, name)
    assert torch.autograd.gradcheck(lambda v: fn(v, off, kernel="torch"), (values,))


def test_gradcheck_padding_round_trip():
    off = offsets_of(GRAD_LENGTHS)
    values = _f64(6, 2)
    # max_len 2 < longest segment: the truncated value must get zero gradient
    assert torch.autograd.gradcheck(
        lambda v: ops.jagged_to_padded(v, off, 2, 1.5, kernel="torch"), (values,)
    )
    padded = _f64(4, 2, 2, seed=1)
    assert torch.autograd.gradcheck(
        lambda p: ops.padded_to_jagged(p, off, 6, kernel="torch"), (padded,)
    )


def test_gradcheck_target_attention():
    off = offsets_of(GRAD_LENGTHS)
    q, k, v = _f64(4, 3, seed=1), _f64(6, 3, seed=2), _f64(6, 2, seed=3)
    assert torch.autograd.gradcheck(
        lambda q, k, v: ops.jagged_target_attention(q, k, v, off, kernel="torch"), (q, k, v)
    )


# ------------------------------------------------------------------------------ errors


def test_kernel_selection_on_cpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cpu = torch.device("cpu")
    assert ops.select_kernel("auto", cpu) == "torch"
    assert ops.select_kernel("torch", cpu) == "torch"
    values, off = _data([1, 2])
    with pytest.raises(ValueError, match="unknown kernel 'cuda'.*'auto', 'torch', 'triton'"):
        ops.segment_sum(values, off, kernel="cuda")
    with pytest.raises(ValueError, match="unknown kernel"):
        ops.lengths_to_mask(off, 3, kernel="Triton")
    if ops.triton_available():
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            ops.segment_mean(values, off, kernel="triton")
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            ops.jagged_target_attention(values[:2], values, values, off, kernel="triton")


def test_bad_offsets():
    values, off = _data([1, 2])
    with pytest.raises(ValueError, match="offsets must be int64, got torch.int32"):
        ops.segment_sum(values, off.int())
    with pytest.raises(ValueError, match=r"offsets must be 1-D of shape \[B\+1\], got shape"):
        ops.segment_sum(values, off.unsqueeze(0))
    with pytest.raises(ValueError, match="offsets must be 1-D"):
        ops.segment_sum(values, off[:0])
    with pytest.raises(ValueError, match="offsets must be a torch.Tensor, got list"):
        ops.segment_sum(values, [0, 1, 3])


def test_bad_values_and_lengths():
    values, off = _data([1, 2])
    with pytest.raises(ValueError, match=r"values must be 1-D or 2-D, got shape \(3, 4, 1\)"):
        ops.segment_max(values.unsqueeze(-1), off)
    with pytest.raises(ValueError, match="values must be a floating-point tensor"):
        ops.segment_sum(values.long(), off)
    with pytest.raises(ValueError, match="max_len must be >= 0, got -1"):
        ops.jagged_to_padded(values, off, -1)
    with pytest.raises(ValueError, match="max_len must be an int, got float"):
        ops.jagged_to_padded(values, off, 2.5)
    with pytest.raises(ValueError, match="padded has 3 rows but offsets describes 2 segments"):
        ops.padded_to_jagged(torch.zeros(3, 2, 4), off)


def test_bad_attention_shapes():
    keys, off = _data([1, 2])
    q = torch.randn(2, 4)
    with pytest.raises(ValueError, match="query has 3 rows but offsets describes 2 segments"):
        ops.jagged_target_attention(torch.randn(3, 4), keys, keys, off)
    with pytest.raises(ValueError, match="keys have dimension 4 but query has dimension 5"):
        ops.jagged_target_attention(torch.randn(2, 5), keys, keys, off)
    with pytest.raises(ValueError, match="keys have 3 rows but values have 2"):
        ops.jagged_target_attention(q, keys, keys[:2], off)
    with pytest.raises(ValueError, match="must share a dtype"):
        ops.jagged_target_attention(q, keys, keys.double(), off)
    with pytest.raises(ValueError, match=r"query must be 2-D, got shape \(4,\)"):
        ops.jagged_target_attention(q[0], keys, keys, off)


def test_reference_has_no_host_sync_helpers():
    # segment_ids takes N from the caller: it must not need offsets[-1] from the device
    off = offsets_of([2, 0, 1])
    assert reference.segment_ids(off, 3).tolist() == [0, 0, 2]

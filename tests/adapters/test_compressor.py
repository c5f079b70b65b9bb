"""The LoopFM compressor, code quantisation and the attention pool over codes (DESIGN §5, §9)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gemkd.adapters import CodeAttentionPool, ReprCompressor, fit_compressor
from gemkd.adapters.compressor import dequantize_codes, quantize_codes
from gemkd.transfer.ops import segment_mean
from tests.transfer.repr_features.conftest import _one_thread  # noqa: F401 (autouse)


def _low_rank(n: int, in_dim: int, scales: list[float], noise: float, seed: int) -> np.ndarray:
    """Rows ``latent · diag(scales) · Q + noise`` with Q orthonormal: known, decaying spectrum."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(in_dim, len(scales))))
    z = rng.normal(size=(n, len(scales))) * np.asarray(scales)
    return (z @ q.T + noise * rng.normal(size=(n, in_dim)) + 3.0).astype(np.float32)


def test_standardisation_guard_on_rank_deficient_input():
    # 12 dims: rank-2 signal on 6, five exactly constant, one with 1e-9 jitter (a "dead" unit
    # that only carries float noise) — the prototype's failure mode
    rng = np.random.default_rng(0)
    x = np.zeros((600, 12), dtype=np.float32)
    x[:, :6] = _low_rank(600, 6, [2.0, 1.0], 0.0, seed=1)
    x[:, 6:11] = np.array([5.0, -1.0, 0.0, 1e4, 2.0], dtype=np.float32)
    x[:, 11] = 0.5 + 1e-9 * rng.normal(size=600)
    model, stats = fit_compressor(x, code_dim=4, epochs=3, batch_size=128, seed=0)
    assert stats["floored_dims"] == 6
    assert model.std.min() >= model.std_floor * model.std.max() * (1 - 1e-6)
    z = model.standardize(torch.from_numpy(x))
    assert torch.isfinite(z).all()
    assert z[:, 6:].abs().max() < 1e-3  # empty directions stay empty, not blown up to unit scale
    codes = model.encode(torch.from_numpy(x))
    assert torch.isfinite(codes).all() and codes.abs().max() < 1
    assert all(np.isfinite(v) for v in stats["r2"].values())
    # an entirely constant input is all empty directions: finite codes, no division by zero
    const, _ = fit_compressor(np.ones((50, 4), dtype=np.float32), code_dim=2, epochs=1, seed=0)
    assert torch.isfinite(const.encode(torch.ones(3, 4))).all()


def test_matryoshka_prefixes_reconstruct_better_with_length():
    x = _low_rank(3000, 24, [3.0, 2.4, 1.9, 1.5, 1.2, 1.0, 0.8, 0.6], 0.05, seed=3)
    model, stats = fit_compressor(x, code_dim=8, epochs=25, batch_size=128, lr=3e-3, seed=0)
    assert model.prefixes == [1, 2, 4, 8]
    r2 = [stats["r2"][p] for p in model.prefixes]
    assert all(a < b for a, b in zip(r2, r2[1:], strict=False)), r2
    assert r2[0] > 0.1 and r2[-1] > 0.85, r2  # the shortest prefix alone is already usable
    assert stats["heldout_rows"] == 300 and stats["train_rows"] == 2700
    # same seed, same model
    _, stats2 = fit_compressor(x[:400], code_dim=8, epochs=2, seed=5)
    _, stats3 = fit_compressor(x[:400], code_dim=8, epochs=2, seed=5)
    assert stats2 == stats3


def test_codes_bounded_and_teacher_gets_no_gradient():
    model = ReprCompressor(in_dim=6, code_dim=4, hidden=8, prefixes=[2, 4])
    model.set_standardization(torch.randn(100, 6))
    emb = (torch.randn(32, 6) * 1e6).requires_grad_(True)  # saturating inputs
    codes = model.encode(emb)
    assert codes.shape == (32, 4) and codes.abs().max() < 1
    loss, per = model.matryoshka_loss(emb)
    assert set(per) == {2, 4}
    loss.backward()
    assert emb.grad is None  # teacher embeddings are data
    assert model.encoder[0].weight.grad is not None
    assert ReprCompressor(5, code_dim=16).prefixes == [1, 2, 4, 8, 16]
    assert ReprCompressor(5, code_dim=12).prefixes == [1, 2, 4, 8, 12]
    with pytest.raises(ValueError):
        ReprCompressor(5, code_dim=4, prefixes=[8])


@pytest.mark.parametrize("bits,code_dim", [(8, 16), (8, 3), (4, 16), (4, 5)])
def test_quantisation_round_trip_error_bounds(bits, code_dim):
    rng = np.random.default_rng(bits + code_dim)
    x = rng.uniform(-1, 1, size=(2000, code_dim)).astype(np.float32)
    levels = 127 if bits == 8 else 7
    x[0] = 1.0
    x[1] = -1.0
    x[2] = 0.0
    x[3] = (np.arange(code_dim) % 7 - 3 + 0.5) / levels  # exact rounding ties
    q = quantize_codes(x, bits)
    if bits == 8:
        assert q.dtype == np.int8 and q.shape == (2000, code_dim)
    else:
        assert q.dtype == np.uint8 and q.shape == (2000, (code_dim + 1) // 2)
    back = dequantize_codes(q, bits, code_dim)
    assert back.dtype == np.float32 and back.shape == x.shape
    assert np.abs(back - x).max() <= 0.5 / levels + 1e-6
    steps = np.rint(back * levels)
    assert np.abs(back * levels - steps).max() < 1e-4 and np.abs(steps).max() <= levels
    assert back[0].tolist() == [1.0] * code_dim and back[1].tolist() == [-1.0] * code_dim
    # a torch tensor of codes from the model quantises the same way
    np.testing.assert_array_equal(quantize_codes(torch.from_numpy(x), bits), q)


def test_int4_packing_layout():
    q = quantize_codes(np.array([[1 / 7, -1.0, 3 / 7]], dtype=np.float32), 4)
    assert q.tolist() == [[0x91, 0x03]]  # low nibble = code 0 (1), high = code 1 (-7 → 0x9)
    with pytest.raises(ValueError):
        quantize_codes(np.zeros((2, 2)), 2)
    with pytest.raises(ValueError):
        dequantize_codes(np.zeros((2, 3), dtype=np.uint8), 4, 8)


# ---- attention pool ----------------------------------------------------------------------------
def test_code_attention_pool():
    torch.manual_seed(0)
    pool = CodeAttentionPool(code_dim=4, query_dim=6)
    codes = torch.tanh(torch.randn(7, 4))
    offsets = torch.tensor([0, 3, 3, 7, 7])  # segments 1 and 3 have no history
    query = torch.randn(4, 6)
    out = pool(query, codes, offsets)
    assert out.shape == (4, 4)
    assert torch.equal(out[1], torch.zeros(4)) and torch.equal(out[3], torch.zeros(4))
    # zero-initialised query: uniform weights, i.e. exactly mean pooling at the first step
    torch.testing.assert_close(out, segment_mean(codes, offsets))
    (out * torch.randn(4, 4)).sum().backward()
    w = pool.query_proj.weight.grad
    assert w is not None and w.abs().sum() > 0
    # after a step away from zero, attention differs from the mean
    with torch.no_grad():
        pool.query_proj.weight.normal_()
    assert not torch.allclose(pool(query, codes, offsets), segment_mean(codes, offsets))
    with pytest.raises(ValueError):
        pool(torch.randn(4, 5), codes, offsets)

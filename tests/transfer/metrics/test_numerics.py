"""gemkd.transfer.metrics.numerics: the one definition of the clip, logit, entropy, log loss and
NE — values at the edges, closed forms, torch's BCE, and numpy/torch agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gemkd.transfer.metrics.numerics import (
    EPS,
    binary_entropy,
    clip_probability,
    log_loss,
    log_loss_from_logits,
    logit,
    ne_from_mean_loss,
    normalized_entropy,
)

TINY = 1e-12
EDGES = [0.0, 1.0, 0.5, TINY, 1.0 - TINY]


def _h(p: float) -> float:
    """Closed form H(p) for 0 < p < 1."""
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def test_eps_is_the_one_clip() -> None:
    assert EPS == 1e-7
    assert clip_probability(0.0) == EPS
    assert clip_probability(1.0) == 1.0 - EPS
    assert clip_probability(0.3) == 0.3
    t = clip_probability(torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64))
    assert t.tolist() == [EPS, 0.3, 1.0 - EPS]
    assert math.isnan(clip_probability(math.nan))


def test_binary_entropy_edges_and_closed_form() -> None:
    assert binary_entropy(0.0) == 0.0
    assert binary_entropy(1.0) == 0.0
    assert binary_entropy(0.5) == pytest.approx(math.log(2), rel=1e-15)
    assert binary_entropy(0.2) == pytest.approx(_h(0.2), rel=1e-14)
    # tiny p: H ≈ p(1 - log p) > 0, not 0 and not nan
    assert binary_entropy(TINY) == pytest.approx(TINY * (1 - math.log(TINY)), rel=1e-6)
    assert binary_entropy(1.0 - TINY) == pytest.approx(binary_entropy(TINY), rel=1e-3)
    for bad in (math.nan, -0.1, 1.1):
        assert math.isnan(binary_entropy(bad))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_binary_entropy_numpy_torch_agree(dtype: torch.dtype) -> None:
    p = np.array(EDGES + [0.01, 0.3, 0.99, math.nan, -0.5, 1.5])
    a = binary_entropy(p)
    t = binary_entropy(torch.tensor(p, dtype=dtype))
    assert isinstance(a, np.ndarray) and isinstance(t, torch.Tensor) and t.dtype == dtype
    tol = 1e-15 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(t.double().numpy(), a, rtol=tol, atol=tol, equal_nan=True)
    assert a[0] == 0.0 and a[1] == 0.0
    assert np.isnan(a[-3:]).all()


def test_logit_edges_and_inverse() -> None:
    assert logit(0.5) == 0.0
    assert logit(0.0) == pytest.approx(math.log(EPS / (1 - EPS)), rel=1e-12)
    assert logit(1.0) == pytest.approx(-logit(0.0), rel=1e-9)
    assert logit(TINY) == logit(0.0)  # clipped to EPS
    assert logit(1.0 - TINY) == logit(1.0)
    p = np.array([1e-5, 0.1, 0.5, 0.9, 1 - 1e-5])
    np.testing.assert_allclose(logit(p), np.log(p / (1 - p)), rtol=1e-12)
    t = torch.tensor(p)
    np.testing.assert_allclose(logit(t).numpy(), torch.logit(t).numpy(), rtol=1e-12)
    np.testing.assert_allclose(torch.sigmoid(logit(t)).numpy(), p, rtol=1e-12)
    assert logit(0.0, eps=0.0) == -math.inf


@pytest.mark.parametrize("p", EDGES)
@pytest.mark.parametrize("y", [0.0, 1.0])
def test_log_loss_matches_torch_bce(p: float, y: float) -> None:
    """torch's BCE clamps log at -100; with the EPS clip both give the clipped closed form."""
    q = min(max(p, EPS), 1 - EPS)
    expect = -(y * math.log(q) + (1 - y) * math.log(1 - q))
    got = log_loss(y, p)
    assert math.isfinite(got)
    assert got == pytest.approx(expect, rel=1e-9, abs=1e-15)
    pt = torch.tensor([q], dtype=torch.float64)
    bce = F.binary_cross_entropy(pt, torch.tensor([y], dtype=torch.float64), reduction="none")
    assert float(log_loss(torch.tensor([y]), torch.tensor([p], dtype=torch.float64))) == \
        pytest.approx(float(bce), rel=1e-9, abs=1e-15)


def test_log_loss_confident_and_wrong_is_capped() -> None:
    assert log_loss(1.0, 0.0) == pytest.approx(-math.log(EPS), rel=1e-9)
    assert log_loss(0.0, 1.0) == pytest.approx(-math.log(EPS), rel=1e-6)
    assert log_loss(1.0, 1.0) == pytest.approx(EPS, rel=1e-6)


def test_log_loss_from_logits_numpy_torch_and_closed_form() -> None:
    x = np.array([-50.0, -3.0, 0.0, 0.7, 40.0])
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    a = log_loss_from_logits(y, x)
    np.testing.assert_allclose(a, np.logaddexp(0.0, x) - y * x, rtol=1e-12)
    t = log_loss_from_logits(torch.tensor(y), torch.tensor(x))
    np.testing.assert_allclose(t.numpy(), a, rtol=1e-12)
    # the same as the clipped probability form wherever the clip does not bite
    p = 1 / (1 + np.exp(-x[1:4]))
    np.testing.assert_allclose(log_loss(y[1:4], p), a[1:4], rtol=1e-10)


def test_log_loss_numpy_torch_agree() -> None:
    p = np.array(EDGES + [0.2, 0.8])
    y = np.array([0, 1, 1, 0, 1, 0, 1], dtype=np.float64)
    np.testing.assert_allclose(log_loss(torch.tensor(y), torch.tensor(p)).numpy(),
                               log_loss(y, p), rtol=1e-14)


def test_ne_from_mean_loss_nan_where_undefined() -> None:
    rates = np.array([0.0, 1.0, math.nan, 0.25])
    ne = ne_from_mean_loss(np.array([0.3, 0.3, 0.3, 0.3]), rates)
    assert np.isnan(ne[:3]).all()
    assert ne[3] == pytest.approx(0.3 / _h(0.25), rel=1e-14)
    t = ne_from_mean_loss(torch.tensor([0.3, 0.3, 0.3, 0.3], dtype=torch.float64),
                          torch.tensor(rates))
    np.testing.assert_allclose(t.numpy(), ne, equal_nan=True, rtol=1e-15)
    assert math.isnan(ne_from_mean_loss(0.1, 0.0))  # never inf
    # broadcasting: [b, T] losses by [T] rates
    b = ne_from_mean_loss(np.full((2, 2), 0.5), np.array([0.5, 0.0]))
    assert b.shape == (2, 2) and np.isnan(b[:, 1]).all()


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.013])
def test_constant_predictor_at_the_base_rate_has_ne_one(rate: float) -> None:
    n = 10_000
    y = np.zeros(n)
    y[: round(rate * n)] = 1.0
    p = np.full(n, y.mean())
    assert normalized_entropy(y, p) == pytest.approx(1.0, rel=1e-12)
    assert normalized_entropy(y, p, base_rate=float(y.mean())) == pytest.approx(1.0, rel=1e-12)
    assert normalized_entropy(torch.tensor(y), torch.tensor(p)) == pytest.approx(1.0, rel=1e-12)


def test_normalized_entropy_closed_form_and_edges() -> None:
    y = np.array([1.0, 0.0, 0.0, 1.0])
    p = np.array([0.9, 0.2, 0.0, 1.0])  # the last two exactly right: clipped, finite
    ll = np.mean([-math.log(0.9), -math.log(0.8), -math.log(1 - EPS), -math.log(1 - EPS)])
    assert normalized_entropy(y, p, base_rate=0.3) == pytest.approx(ll / _h(0.3), rel=1e-12)
    assert normalized_entropy(y, p) == pytest.approx(ll / math.log(2), rel=1e-12)
    assert math.isnan(normalized_entropy(np.zeros(3), np.full(3, 0.1)))  # own rate 0
    assert math.isnan(normalized_entropy(y, p, base_rate=1.0))
    assert math.isnan(normalized_entropy(np.array([]), np.array([])))

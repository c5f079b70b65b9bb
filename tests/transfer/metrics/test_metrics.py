"""Metric values against hand-computed numbers and independent numpy formulas (DESIGN §6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gemkd.transfer.metrics import (
    Calibration,
    NormalizedEntropy,
    SafeBinaryAUROC,
    binary_auc,
    binary_entropy,
)
from tests.transfer.metrics.reference import np_auc, np_entropy, np_logloss_logits, np_sigmoid, t

LN2 = math.log(2.0)
H25 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.5623351446...

# ---- NormalizedEntropy -------------------------------------------------------------------------


def test_ne_hand_computed_from_eval_labels():
    # p = 0.5 everywhere: log loss ln 2; labels mean 0.25 -> NE = ln2 / H(0.25).
    m = NormalizedEntropy(from_logits=False)
    m.update(t([0.5, 0.5, 0.5, 0.5]), t([1, 0, 0, 0]))
    assert m.compute().item() == pytest.approx(LN2 / H25, rel=1e-12)
    assert LN2 / H25 == pytest.approx(1.2326, abs=1e-4)


def test_ne_predicting_the_base_rate_is_one():
    m = NormalizedEntropy(from_logits=False)
    m.update(t([0.25] * 8), t([1, 0, 0, 0, 1, 0, 0, 0]))
    assert m.compute().item() == pytest.approx(1.0, rel=1e-6)


def test_ne_training_base_rate_versus_eval_labels():
    x = np.array([-2.0, -0.5, 0.3, 1.7, -1.1, 0.0])
    y = np.array([0, 0, 1, 1, 0, 1], dtype=float)
    mean_loss = np_logloss_logits(x, y).mean()
    trained = NormalizedEntropy(base_rate=0.1)
    evaluated = NormalizedEntropy()
    for m in (trained, evaluated):
        m.update(torch.from_numpy(x), torch.from_numpy(y))
    assert trained.compute().item() == pytest.approx(mean_loss / np_entropy(0.1), rel=1e-12)
    assert evaluated.compute().item() == pytest.approx(mean_loss / np_entropy(0.5), rel=1e-12)


def test_ne_logits_and_probabilities_agree():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, generator=g) * 3
    y = (torch.rand(64, generator=g) < 0.3).float()
    a, b = NormalizedEntropy(base_rate=0.3), NormalizedEntropy(base_rate=0.3, from_logits=False)
    a.update(x, y)
    b.update(torch.sigmoid(x.double()), y)
    expected = np_logloss_logits(x.double().numpy(), y.numpy()).mean() / np_entropy(0.3)
    assert a.compute().item() == pytest.approx(expected, rel=1e-12)
    assert b.compute().item() == pytest.approx(expected, rel=1e-9)


def test_ne_probabilities_exactly_zero_or_one_are_large_but_finite():
    eps = 1e-7
    m = NormalizedEntropy(from_logits=False, eps=eps)
    # two confident mistakes, two confident hits
    m.update(t([0.0, 1.0, 1.0, 0.0]), t([1, 0, 1, 0]))
    value = m.compute().item()
    mean_loss = (2 * -math.log(eps) + 2 * -math.log(1 - eps)) / 4
    assert math.isfinite(value)
    assert value == pytest.approx(mean_loss / LN2, rel=1e-9)


def test_ne_extreme_logits_are_exact():
    m = NormalizedEntropy(base_rate=0.5)
    m.update(t([60.0, -60.0]), t([0, 0]))
    assert m.compute().item() == pytest.approx((60.0 + 0.0) / 2 / LN2, rel=1e-12)


@pytest.mark.parametrize(
    ("base_rate", "finite"), [(None, False), (0.0, False), (1.0, False), (0.2, True)]
)
def test_ne_all_zero_labels(base_rate, finite):
    m = NormalizedEntropy(base_rate=base_rate)
    m.update(t([-1.0, -2.0, 0.5]), t([0, 0, 0]))
    value = m.compute().item()
    if finite:
        expected = np_logloss_logits(np.array([-1.0, -2.0, 0.5]), np.zeros(3)).mean()
        assert value == pytest.approx(expected / np_entropy(0.2), rel=1e-12)
    else:
        assert math.isnan(value)


def test_ne_no_samples_is_nan():
    m = NormalizedEntropy(base_rate=0.2)
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(m.compute().item())
    m.update(torch.empty(0), torch.empty(0))  # an empty batch is not an error either
    assert math.isnan(m.compute().item())


def test_ne_rejects_bad_input():
    with pytest.raises(ValueError, match="base_rate"):
        NormalizedEntropy(base_rate=1.5)
    with pytest.raises(ValueError, match="0 and 1"):
        NormalizedEntropy().update(t([0.1, 0.2]), t([0.0, 2.0]))
    with pytest.raises(ValueError, match="probabilities"):
        NormalizedEntropy(from_logits=False).update(t([0.1, 1.2]), t([0, 1]))
    with pytest.raises(ValueError, match="shapes"):
        NormalizedEntropy().update(t([0.1, 0.2]), t([0]))


# ---- Calibration -------------------------------------------------------------------------------


def test_calibration_hand_computed():
    m = Calibration(from_logits=False)
    m.update(t([0.1, 0.1, 0.1, 0.1]), t([1, 0, 0, 0]))
    assert m.compute().item() == pytest.approx(0.4, rel=1e-7)
    m.update(t([0.9, 0.6]), t([1, 1]))  # (0.4 + 1.5) / 3
    assert m.compute().item() == pytest.approx(1.9 / 3, rel=1e-7)


def test_calibration_from_logits():
    x = np.array([-1.0, 0.0, 2.0, 0.5])
    y = np.array([0, 1, 1, 0], dtype=float)
    m = Calibration()
    m.update(torch.from_numpy(x), torch.from_numpy(y))
    assert m.compute().item() == pytest.approx(np_sigmoid(x).sum() / 2, rel=1e-12)


def test_calibration_without_positives_is_nan():
    m = Calibration()
    m.update(t([0.3, -1.0]), t([0, 0]))
    assert math.isnan(m.compute().item())
    with pytest.warns(UserWarning):
        assert math.isnan(Calibration().compute().item())


# ---- AUC ---------------------------------------------------------------------------------------


def test_auc_matches_pairwise_with_ties():
    g = torch.Generator().manual_seed(2)
    s = torch.randint(0, 6, (80,), generator=g).float() / 5  # many ties
    y = (torch.rand(80, generator=g) < 0.4).long()
    expected = np_auc(s.numpy(), y.numpy())
    m = SafeBinaryAUROC()
    m.update(s, y.float())  # float 0/1 targets are accepted
    assert m.compute().item() == pytest.approx(expected, abs=1e-6)
    assert binary_auc(s, y).item() == pytest.approx(expected, abs=1e-6)


def test_auc_hand_computed_mixed_logit_batches():
    # Logits whose first batch happens to lie in [0, 1]: plain BinaryAUROC sigmoids only the
    # second batch and ranks 0.9 above 2.0 (it returns 0.5). Pairs: (0.5>0.3) (0.5<0.9)
    # (2>0.3) (2>0.9) -> 3/4.
    m = SafeBinaryAUROC()
    m.update(t([0.3, 0.9]), t([0, 0]))
    m.update(t([0.5, 2.0]), t([1, 1]))
    assert m.compute().item() == pytest.approx(0.75)


def test_auc_does_not_saturate_on_large_logits():
    s, y = t([40.0, 41.0, 42.0]), t([0, 1, 1])
    m = SafeBinaryAUROC()
    m.update(s, y)
    assert m.compute().item() == pytest.approx(1.0)
    assert binary_auc(s, y).item() == pytest.approx(1.0)


@pytest.mark.parametrize("label", [0, 1])
def test_auc_single_class_is_nan_without_warnings(no_warnings, label):
    m = SafeBinaryAUROC()
    m.update(t([0.1, 0.7, 0.3]), t([label] * 3))
    assert math.isnan(m.compute().item())
    assert math.isnan(binary_auc(t([0.1, 0.7]), t([label] * 2)).item())
    assert math.isnan(binary_auc(torch.empty(0), torch.empty(0)).item())


def test_auc_no_samples_is_nan():
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(SafeBinaryAUROC().compute().item())


def test_auc_rejects_non_binary_targets():
    with pytest.raises(ValueError, match="0 and 1"):
        SafeBinaryAUROC().update(t([0.1, 0.2]), t([0, 3]))


def test_binary_entropy_edges():
    h = binary_entropy(torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64))
    assert h.tolist() == pytest.approx([0.0, H25, LN2, 0.0], abs=1e-15)

"""Independent numpy references the metric tests compare against, and their small helpers."""

from __future__ import annotations

import math

import numpy as np
import torch

# ---- independent numpy references -------------------------------------------------------------


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def np_logloss_logits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log(1 + e^x) - y x: the log loss written without probabilities."""
    return np.logaddexp(0.0, x) - y * x


def np_entropy(p: float) -> float:
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def np_auc(s: np.ndarray, y: np.ndarray) -> float:
    """Mann-Whitney: P(score of a positive > score of a negative), ties count one half."""
    pos, neg = s[y == 1], s[y == 0]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def same(a: float, b: float, tol: float = 1e-9) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol * max(1.0, abs(b))


def t(x, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(x, dtype=dtype)

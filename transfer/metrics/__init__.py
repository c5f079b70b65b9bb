"""Evaluation metrics (DESIGN §6): normalized entropy, ROC AUC and calibration, per task and
per domain, as torchmetrics ``Metric``s so that Lightning and DDP accumulate and sync them."""

from gemkd.transfer.metrics.auc import SafeBinaryAUROC, binary_auc
from gemkd.transfer.metrics.calibration import Calibration
from gemkd.transfer.metrics.multitask import RankingMetrics, to_frame
from gemkd.transfer.metrics.ne import NormalizedEntropy, binary_entropy

__all__ = [
    "Calibration",
    "NormalizedEntropy",
    "RankingMetrics",
    "SafeBinaryAUROC",
    "binary_auc",
    "binary_entropy",
    "to_frame",
]

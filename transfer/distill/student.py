"""The Student protocol: what every vertical model receives and returns (DESIGN §5).

A student is any ``torch.nn.Module`` whose ``forward(batch, features=None)`` returns a
``StudentOutput``. ``batch`` is a ``transfer.data.batch.Batch``; ``features`` is ``None`` or the
representation features ``[B, F]`` (LoopFM codes pooled per example) when the experiment feeds
them. Transfer methods never look inside a student: they use the serving logits, the optional
distillation-head logits, and the optional embedding (the input of an auxiliary head).
It lives in ``transfer`` so pipelines can use it without importing ``students``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StudentOutput:
    """``logits [B, T]`` serving head (the only one evaluated and served);
    ``distill_logits [B, T]`` a student's own distillation head, if it has one;
    ``embedding [B, E]`` the shared trunk's output, input to an auxiliary distillation head."""

    logits: torch.Tensor
    distill_logits: torch.Tensor | None = None
    embedding: torch.Tensor | None = None

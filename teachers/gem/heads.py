"""Multi-domain, multi-task heads on a shared trunk: ``[B, trunk_dim] → logits [B, n_tasks]``.

- ``domain_task``: one small MLP per (domain, task); all heads run as two batched matmuls and
  each example keeps its own domain's row.
- ``domain_gated``: shared experts, a per-task softmax gate over them whose logits carry a
  per-domain bias, a per-task tower, and a per-(domain, task) logit bias (MMoE-style); the
  experts and gates in one matmul, both per-domain biases in one lookup.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gemkd.transfer.options import HEAD_TYPES, HeadType

__all__ = ["HEAD_TYPES", "DomainGatedHeads", "DomainTaskHeads", "build_heads"]


def _uniform(*shape: int, fan_in: int) -> nn.Parameter:
    bound = fan_in**-0.5
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class DomainTaskHeads(nn.Module):
    """A separate ``Linear → GELU → Linear`` head for every (domain, task) pair."""

    def __init__(self, in_dim: int, n_domains: int, n_tasks: int, hidden: int):
        super().__init__()
        self.n_domains, self.n_tasks = n_domains, n_tasks
        self.n_heads, self.hidden = n_domains * n_tasks, hidden
        self.fc1 = nn.Linear(in_dim, self.n_heads * hidden)  # all heads' first layers at once
        self.w2 = _uniform(self.n_heads, hidden, fan_in=hidden)
        self.b2 = _uniform(self.n_heads, fan_in=hidden)

    @torch.no_grad()
    def set_output_bias(self, logit: Tensor) -> None:
        """Every (domain, task) head's output bias to ``logit [n_tasks]``."""
        self.b2.view(self.n_domains, self.n_tasks).copy_(logit.to(self.b2).expand(
            self.n_domains, -1))

    def forward(self, x: Tensor, domain: Tensor) -> Tensor:
        z = F.gelu(self.fc1(x)).view(-1, self.n_heads, self.hidden)
        logits = (z * self.w2).sum(-1) + self.b2  # [B, H]
        logits = logits.view(-1, self.n_domains, self.n_tasks)
        return logits.gather(1, domain.view(-1, 1, 1).expand(-1, 1, self.n_tasks)).squeeze(1)


class DomainGatedHeads(nn.Module):
    """Experts shared by all tasks and domains, mixed per task by a domain-aware gate.

    The experts' and the gates' projections run as one matmul and the two per-domain tables as
    one lookup (fewer ops a step: a GPU step is launch-bound); ``reference = True`` runs them
    one by one, as before (the tests' reference: the same numbers up to summation order).
    """

    #: one matmul and one lookup per call unless set (an attribute, not a weight)
    reference: bool = False

    def __init__(self, in_dim: int, n_domains: int, n_tasks: int, hidden: int, n_experts: int):
        super().__init__()
        self.n_tasks, self.n_experts, self.hidden = n_tasks, n_experts, hidden
        self.experts = nn.Linear(in_dim, n_experts * hidden)
        self.gates = nn.Linear(in_dim, n_tasks * n_experts)
        self.gate_bias = nn.Embedding(n_domains, n_tasks * n_experts)
        self.tower = _uniform(n_tasks, hidden, fan_in=hidden)
        self.logit_bias = nn.Embedding(n_domains, n_tasks)
        nn.init.zeros_(self.gate_bias.weight)
        nn.init.zeros_(self.logit_bias.weight)

    @torch.no_grad()
    def set_output_bias(self, logit: Tensor) -> None:
        """Every domain's per-task logit bias to ``logit [n_tasks]``."""
        w = self.logit_bias.weight
        w.copy_(logit.to(w).expand(w.shape[0], -1))

    def forward(self, x: Tensor, domain: Tensor) -> Tensor:
        b = x.shape[0]
        if self.reference:
            h, g = self.experts(x), self.gates(x) + self.gate_bias(domain)
            logit_bias = self.logit_bias(domain)
        else:  # experts and gates read x: one matmul; both domain tables: one lookup
            n_h = self.n_experts * self.hidden
            w = torch.cat([self.experts.weight, self.gates.weight])
            h, g = F.linear(x, w, torch.cat([self.experts.bias, self.gates.bias])).split(
                [n_h, w.shape[0] - n_h], dim=-1)
            table = torch.cat([self.gate_bias.weight, self.logit_bias.weight], dim=1)
            gate_bias, logit_bias = F.embedding(domain, table).split(
                [self.gate_bias.weight.shape[1], self.n_tasks], dim=-1)
            g = g + gate_bias
        experts = F.gelu(h).view(b, self.n_experts, self.hidden)
        mixed = torch.matmul(g.view(b, self.n_tasks, self.n_experts).softmax(-1), experts)
        return (mixed * self.tower).sum(-1) + logit_bias  # [B, T]


def build_heads(
    head_type: HeadType, in_dim: int, n_domains: int, n_tasks: int, hidden: int, n_experts: int
) -> DomainTaskHeads | DomainGatedHeads:
    if head_type == "domain_task":
        return DomainTaskHeads(in_dim, n_domains, n_tasks, hidden)
    if head_type == "domain_gated":
        return DomainGatedHeads(in_dim, n_domains, n_tasks, hidden, n_experts)
    raise ValueError(f"head_type must be one of {HEAD_TYPES}, got {head_type!r}")

"""Student Adapter (ExFM, DESIGN §5): realign a stale teacher with the student's fresh labels.

``z_SA = z_t + g(z_t, domain, staleness[, features])`` where ``g`` is a small MLP whose last
layer starts at zero, so the adapter starts as the identity (the teacher itself) and only moves
where the fresh labels say the teacher is off. It is trained on the student's own stream with
``BCE(σ(z_SA), y)``; the student distils from ``stopgrad(σ(z_SA))``. Optional categorical
features of the example (e.g. the ad's category) let it correct the teacher per segment.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from gemkd.transfer.layers import HashedEmbedding
from gemkd.transfer.packs import stacked


class StudentAdapter(nn.Module):
    """``n_tasks`` teacher logits in, as many realigned logits out. ``feature_rows`` gives the
    table size of each extra categorical input (embedded in ``domain_dim`` dimensions)."""

    def __init__(self, n_tasks: int, n_domains: int, hidden: int = 16,
                 domain_dim: int = 4, use_staleness: bool = True,
                 feature_rows: list[int] | None = None) -> None:
        super().__init__()
        if n_tasks < 1 or n_domains < 1 or hidden < 1:
            raise ValueError("StudentAdapter needs n_tasks, n_domains and hidden >= 1")
        self.domain = nn.Embedding(n_domains, domain_dim)
        self.use_staleness = use_staleness
        self.features = nn.ModuleList(HashedEmbedding(rows, domain_dim)
                                      for rows in (feature_rows or []))
        in_dim = n_tasks + domain_dim * (1 + len(self.features)) + int(use_staleness)
        first, out = nn.Linear(in_dim, hidden), nn.Linear(hidden, n_tasks)  # in this order: RNG
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)
        self.net = nn.Sequential(first, nn.ReLU(), out)

    def forward(self, teacher_logits: torch.Tensor, domain: torch.Tensor,
                staleness_days: torch.Tensor | None = None,
                features: torch.Tensor | None = None) -> torch.Tensor:
        """``teacher_logits [B, T]``, ``domain [B]``, ``staleness_days [B]``, ``features
        [B, n_features]`` (ids of the extra categorical inputs) → ``z_SA [B, T]``."""
        if self.domain.weight.dim() == 3:  # a stacked pack's members at once
            return self._stacked(teacher_logits, domain, staleness_days, features)
        parts = [teacher_logits, self.domain(domain)]
        if len(self.features):
            if features is None:
                raise ValueError(f"StudentAdapter: {len(self.features)} feature inputs, got no "
                                 "features")
            for j, table in enumerate(self.features):
                parts.append(table(features[:, j]))
        if self.use_staleness:
            parts.append(self._age(teacher_logits, staleness_days))
        return teacher_logits + self.net(torch.cat(parts, dim=-1))

    @staticmethod
    def _age(teacher_logits: torch.Tensor, staleness_days: torch.Tensor | None) -> torch.Tensor:
        """``[B, 1]`` log(1 + the teacher's age in days), 0 when not given."""
        if staleness_days is None:
            staleness_days = torch.zeros_like(teacher_logits[:, 0])
        return torch.log1p(staleness_days.to(teacher_logits.dtype).clamp_min(0)).unsqueeze(-1)

    def _stacked(self, teacher_logits: torch.Tensor, domain: torch.Tensor,
                 staleness_days: torch.Tensor | None,
                 features: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward` with every parameter ``[K, ...]`` (a pack's members): ``[K, B, T]``."""
        k = self.domain.weight.shape[0]
        rows = [stacked.lookup(domain, self.domain.weight)]
        if len(self.features):
            if features is None:
                raise ValueError(f"StudentAdapter: {len(self.features)} feature inputs, got no "
                                 "features")
            tables = [cast(HashedEmbedding, t) for t in self.features]
            rows += [stacked.lookup(torch.remainder(features[:, j], table.num_embeddings),
                                    table.weight) for j, table in enumerate(tables)]
        logits = teacher_logits.unsqueeze(0).expand(k, *teacher_logits.shape)
        parts = [logits, *rows]
        if self.use_staleness:
            age = self._age(teacher_logits, staleness_days)
            parts.append(age.unsqueeze(0).expand(k, *age.shape))
        first, _, out = self.net
        assert isinstance(first, nn.Linear) and isinstance(out, nn.Linear)
        hidden = torch.relu(stacked.linear(torch.cat(parts, dim=-1), first.weight, first.bias))
        return logits + stacked.linear(hidden, out.weight, out.bias)

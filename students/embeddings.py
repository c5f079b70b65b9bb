"""Hashed embedding tables and on-device history truncation for students (DESIGN §2.2, §2.5).

Students may not import ``teachers`` (DESIGN §1), so the small hashing table lives here too.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

# Sequence field -> categorical feature whose table it shares when the student uses both, so a
# history event and the candidate ad live in one space (what target attention compares).
SHARED_TABLES: dict[str, str] = {
    "hist_item_id": "ad_id",
    "hist_category": "ad_category",
}


class HashedEmbedding(nn.Embedding):
    """An embedding table that hashes ids modulo its row count (negative ids included), so a
    student can cap its tables at ``max_rows`` and still accept any id."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)
        nn.init.normal_(self.weight, std=embedding_dim**-0.5)

    def forward(self, ids: Tensor) -> Tensor:
        return super().forward(torch.remainder(ids, self.num_embeddings))


def recent_index(offsets: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Indices of the ``k`` most recent (last) events of each segment, and their new offsets.

    ``offsets [B+1]`` → ``(index [N'], new_offsets [B+1])`` with ``N' = Σ min(len_b, k)``;
    vectorised, one host sync (to learn ``N'``), events keep their oldest-first order.
    """
    lengths = offsets[1:] - offsets[:-1]
    keep = lengths.clamp(max=k)
    new_offsets = torch.zeros_like(offsets)
    new_offsets[1:] = torch.cumsum(keep, 0)
    n = int(new_offsets[-1])
    seg = torch.repeat_interleave(torch.arange(keep.shape[0], device=offsets.device), keep,
                                  output_size=n)
    pos = torch.arange(n, device=offsets.device) - new_offsets[seg]
    return offsets[1:][seg] - keep[seg] + pos, new_offsets

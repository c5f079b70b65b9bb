"""Target attention over a user's as-of teacher codes (LoopFM's attention pooling, DESIGN §5).

The candidate (e.g. the ad embedding the student already has) asks which of the user's past
codes matter for it: ``softmax(W q · c_i / sqrt(code_dim))`` weights the codes ``c_i``. The
query projection starts at zero, so at the first step every weight is uniform and the pool is
exactly the mean of the codes — a safe start from which one streaming pass can learn to focus.
"""

from __future__ import annotations

from torch import Tensor, nn

from gemkd.transfer.ops import jagged_target_attention


class CodeAttentionPool(nn.Module):
    """``(query [B, query_dim], codes [N, code_dim], offsets [B+1]) -> [B, code_dim]``.

    Keys and values are the codes themselves (bounded, already informative); only the query is
    learned. An example with no earlier codes pools to zeros.
    """

    def __init__(self, code_dim: int, query_dim: int, kernel: str = "auto") -> None:
        super().__init__()
        if code_dim < 1 or query_dim < 1:
            raise ValueError(f"code_dim and query_dim must be >= 1, got {code_dim}, {query_dim}")
        self.code_dim, self.query_dim, self.kernel = code_dim, query_dim, kernel
        self.query_proj = nn.Linear(query_dim, code_dim)
        nn.init.zeros_(self.query_proj.weight)
        nn.init.zeros_(self.query_proj.bias)

    def forward(self, query: Tensor, codes: Tensor, offsets: Tensor) -> Tensor:
        if query.ndim != 2 or query.shape[1] != self.query_dim:
            raise ValueError(f"query must be [B, {self.query_dim}], got {list(query.shape)}")
        if codes.ndim != 2 or codes.shape[1] != self.code_dim:
            raise ValueError(f"codes must be [N, {self.code_dim}], got {list(codes.shape)}")
        q = self.query_proj(query).to(codes.dtype)
        return jagged_target_attention(q, codes, codes, offsets, kernel=self.kernel)

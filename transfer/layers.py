"""Layers teachers and students share: hashed embedding tables (DESIGN §3, "Embeddings").

Both model packages build their tables from this one class, so a student can take over a
teacher's table row for row (parameter sharing, DESIGN §5) and a fix reaches both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Sequence field -> the categorical features whose table it shares when a model uses both (the
# first present), so a history event and the candidate item live in one space (what target
# attention compares): ads in the synthetic world, items in MovieLens and KuaiRand.
SHARED_TABLES: dict[str, tuple[str, ...]] = {
    "hist_item_id": ("ad_id", "item_id"),
    "hist_category": ("ad_category",),
}


def default_shared_tables(sequence: list[str], categorical: list[str]) -> dict[str, str]:
    """The sharing map for these field names: each sequence field of :data:`SHARED_TABLES` onto
    the first of its categorical features that is present."""
    out = {}
    for seq, cats in SHARED_TABLES.items():
        cat = next((c for c in cats if c in categorical), None)
        if seq in sequence and cat is not None:
            out[seq] = cat
    return out


class _MeanBags(torch.autograd.Function):
    """``F.embedding_bag(ids, weight, offsets, mode="mean")`` whose weight gradient is computed
    as an embedding bag too: events sorted by id, each id's bag sums the gradients of the bags
    its events are in, scaled by 1/bag size. The same numbers as the native backward (up to
    summation order) but about 2x cheaper on CPU for long histories, where the native dense
    backward's per-event sort/select work dominates a training step. ``sparse``: the gradient
    is row-sparse (the rows the bags read, each once), as ``sparse=True`` gives."""

    @staticmethod
    def forward(ctx, weight: Tensor, ids: Tensor, offsets: Tensor, sparse: bool = False
                ) -> Tensor:
        ctx.save_for_backward(ids, offsets)
        ctx.rows, ctx.dtype, ctx.sparse = weight.shape[0], weight.dtype, sparse
        return F.embedding_bag(ids, weight, offsets, mode="mean", include_last_offset=True)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        ids, offsets = ctx.saved_tensors
        sizes = offsets[1:] - offsets[:-1]
        scaled = grad / sizes.clamp(min=1).unsqueeze(1).to(grad.dtype)
        bag = torch.repeat_interleave(
            torch.arange(sizes.shape[0], device=ids.device), sizes, output_size=ids.shape[0]
        )
        sorted_ids, perm = torch.sort(ids, stable=True)
        if ctx.sparse:  # one bag per row read: its events' bags' gradients
            rows, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
            row_offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        else:  # one bag per row of the table (empty for a row not read)
            row_offsets = torch.zeros(ctx.rows + 1, dtype=ids.dtype, device=ids.device)
            torch.cumsum(torch.bincount(sorted_ids, minlength=ctx.rows), 0, out=row_offsets[1:])
        gw = F.embedding_bag(
            bag.index_select(0, perm), scaled, row_offsets, mode="sum", include_last_offset=True
        ).to(ctx.dtype)
        if ctx.sparse:
            gw = torch.sparse_coo_tensor(rows.unsqueeze(0), gw, (ctx.rows, gw.shape[1]),
                                         is_coalesced=True, check_invariants=False)
        return gw, None, None, None


class HashedEmbedding(nn.Embedding):
    """An embedding table that hashes ids modulo its row count (negative ids included), so a
    model can cap its tables at ``max_rows`` and still accept any id. With ``sparse`` set
    (:func:`gemkd.transfer.training.table_optim.set_sparse_tables`) its lookups and bags give
    row-sparse gradients."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)
        nn.init.normal_(self.weight, std=embedding_dim**-0.5)

    def forward(self, ids: Tensor, bag_offsets: Tensor | None = None) -> Tensor:
        """``ids [...] → [..., d]``; with ``bag_offsets [n_bags + 1]`` (jagged offsets into
        1-D ``ids``) the mean of each bag instead, ``[n_bags, d]`` (0 for an empty bag), without
        materialising the per-id rows."""
        ids = torch.remainder(ids, self.num_embeddings)
        if bag_offsets is None:
            return super().forward(ids)
        if ids.device.type == "cpu" and torch.is_grad_enabled() and self.weight.requires_grad:
            return _MeanBags.apply(self.weight, ids, bag_offsets, self.sparse)
        return F.embedding_bag(ids, self.weight, bag_offsets, mode="mean",
                               include_last_offset=True, sparse=self.sparse)

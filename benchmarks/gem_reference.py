"""GEM's reference code paths, for before/after comparisons only: the untrimmed pyramid layout
and k and v from one packed projection, permuted (the code before GEM's speed-only paths).

Both give GEM's numbers up to float summation order (tests/teachers/gem/test_gem_fast_paths.py);
the streaming teacher benchmark's ``before`` candidate trains on them
(``benchmarks/bench_teacher_stream.py``). The library keeps one path each; the reference
attention lives here as a forward bound to an instance.
"""

from __future__ import annotations

import types

import torch.nn.functional as F
from torch import Tensor, nn

from gemkd.teachers.gem.blocks import MultiHeadAttention
from gemkd.teachers.gem.heads import DomainGatedHeads
from gemkd.teachers.gem.pyramid import PyramidCompressor
from gemkd.teachers.gem.wukong import FactorizationMachineBlock, WukongLayer


def packed_kv_forward(self: MultiHeadAttention, queries: Tensor, keys: Tensor,
                      key_mask: Tensor) -> Tensor:
    """:meth:`MultiHeadAttention.forward` with k and v from one ``kv`` matmul, viewed as ``[B,
    L, 2, h, d/h]`` and permuted (a copy in the forward and the backward pass), the same
    weights as the library's two matmuls."""
    b, lq, d = queries.shape
    lk = keys.shape[1]
    h = self.n_heads
    q = self.q(queries).view(b, lq, h, d // h).transpose(1, 2)
    k, v = self.kv(keys).view(b, lk, 2, h, d // h).permute(2, 0, 3, 1, 4)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :],
                                       dropout_p=self.dropout if self.training else 0.0)
    return self.out(o.transpose(1, 2).reshape(b, lq, d))


def on_reference_paths(module: nn.Module) -> bool:
    """Whether ``module`` (an attention or a pyramid) runs its reference path."""
    if isinstance(module, PyramidCompressor):
        return not module.trim
    return "forward" in vars(module)


def set_reference_paths(model: nn.Module, on: bool = True) -> None:
    """Switch every GEM block in ``model`` to (``on``) or back from its reference code paths.

    Parameters
    ----------
    model
        A GEM, a domain FM, or any module holding their blocks (a Lightning module).
    on
        True: the untrimmed pyramid layout, the packed kv projection and Wukong's and the
        gated heads' matmuls one by one; False: the library's paths.
    """
    for m in model.modules():
        if isinstance(m, PyramidCompressor):
            m.trim = not on
        elif isinstance(m, WukongLayer | FactorizationMachineBlock | DomainGatedHeads):
            m.reference = on
        elif isinstance(m, MultiHeadAttention):
            if on:
                m.forward = types.MethodType(packed_kv_forward, m)  # type: ignore[method-assign]
            else:
                vars(m).pop("forward", None)

"""GEM's speed-only code paths against its reference paths (benchmarks/gem_reference.py): the
trimmed pyramid layout, k and v as two matmuls (q, k and v as one in self-attention), Wukong's
token mixes in one bmm. Each must give the reference path's outputs and gradients up to float
summation order, and training on them the same weights."""

from __future__ import annotations

import pytest
import torch

from benchmarks.gem_reference import on_reference_paths, set_reference_paths
from gemkd.teachers import GEM, DomainFM
from gemkd.teachers.gem.blocks import MultiHeadAttention
from gemkd.teachers.gem.pyramid import (
    PyramidCompressor,
    pyramid_coverage,
    pyramid_reachable_tokens,
    pyramid_token_count,
)
from gemkd.teachers.gem.wukong import FactorizationMachineBlock, WukongLayer
from tests.teachers.helpers import TINY, batch_from_lengths, random_batch, tiny_schema

CLOSE = dict(atol=1e-5, rtol=1e-4)


def offsets_of(lengths: list[int]) -> torch.Tensor:
    out = torch.zeros(len(lengths) + 1, dtype=torch.long)
    out[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.long), 0)
    return out


def slot_starts(levels: int, r: int, c: int) -> list[int]:
    """Every slot's first position, most recent first (the pyramid's layout, spelled out)."""
    return [pyramid_coverage(lvl, r, c) + i * c**lvl for lvl in range(levels) for i in range(r)]


# ----------------------------------------------------------------------------- the layout
@pytest.mark.parametrize(("r", "c"), [(8, 4), (2, 2), (4, 3), (16, 4)])
def test_reachable_tokens_are_the_slots_a_history_can_fill(r, c):
    for length in [*range(0, 300), 2047, 2048, 2049, 5000]:
        full = pyramid_token_count(length, r, c)
        starts = slot_starts(full // r, r, c)
        expected = max(r, sum(s < length for s in starts))
        assert pyramid_reachable_tokens(length, r, c) == expected <= full, length


def test_trimmed_layout_is_the_untrimmed_one_without_its_empty_columns():
    torch.manual_seed(0)
    d = 4
    lengths = [256, 40, 0, 7, 200, 1, 255]
    events = torch.randn(sum(lengths), d)
    offsets = offsets_of(lengths)
    full = PyramidCompressor(d, recent=8, chunk=4, max_history=2048)
    trim = PyramidCompressor(d, recent=8, chunk=4, max_history=2048, trim=True)
    trim.load_state_dict(full.state_dict())
    tok_f, mask_f = full(events, offsets, max_len=256)
    tok_t, mask_t = trim(events, offsets, max_len=256)
    assert tok_f.shape[1] == 32 and tok_t.shape[1] == 26  # 256 events: 8 + 8 + 8 + 2 chunks
    cut = tok_f.shape[1] - tok_t.shape[1]
    assert not mask_f[:, :cut].any() and tok_f[:, :cut].abs().sum() == 0
    assert torch.equal(mask_t, mask_f[:, cut:])
    torch.testing.assert_close(tok_t, tok_f[:, cut:], atol=0, rtol=0)
    # the same chunks as segments: fused lookups pool the same events
    chunks_f, t_f = full.segments(offsets, events.shape[0], 256)
    chunks_t, t_t = trim.segments(offsets, events.shape[0], 256)
    starts_f = chunks_f[:-1].view(len(lengths), t_f)[:, t_f - t_t:]
    assert torch.equal(chunks_t[:-1].view(len(lengths), t_t), starts_f)


# ----------------------------------------------------------------------------- attention
def test_split_kv_attention_equals_packed_kv():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d=8, n_heads=2)
    q, kv = torch.randn(5, 3, 8, requires_grad=True), torch.randn(5, 7, 8, requires_grad=True)
    mask = torch.rand(5, 7) > 0.4
    mask[:, 0] = True
    grads = []
    for packed in (True, False):
        set_reference_paths(attn, on=packed)
        assert on_reference_paths(attn) == packed
        attn.zero_grad()
        q.grad = kv.grad = None
        out = attn(q, kv, mask)
        (out * torch.linspace(-1, 1, 8)).sum().backward()
        grads.append((out.detach(), q.grad, kv.grad, *(p.grad for p in attn.parameters())))
    for ref, new in zip(*grads, strict=True):
        torch.testing.assert_close(new, ref, **CLOSE)


def test_self_attention_in_one_matmul_equals_packed_kv():
    """``keys is queries``: q, k and v from one matmul over the concatenated weights."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(d=8, n_heads=2)
    z = torch.randn(5, 7, 8, requires_grad=True)
    mask = torch.rand(5, 7) > 0.4
    mask[:, 0] = True
    grads = []
    for packed in (True, False):
        attn.packed_kv = packed
        attn.zero_grad()
        z.grad = None
        out = attn(z, z, mask)
        (out * torch.linspace(-1, 1, 8)).sum().backward()
        grads.append((out.detach(), z.grad, *(p.grad for p in attn.parameters())))
    for ref, new in zip(*grads, strict=True):
        torch.testing.assert_close(new, ref, **CLOSE)


@pytest.mark.parametrize(("n_in", "n_F", "n_L"), [(7, 3, 3), (6, 3, 3), (7, 4, 0)])
def test_wukong_layer_in_fewer_matmuls_equals_the_reference(n_in, n_F, n_L):
    """One bmm for LCB and the residual projection, bmm for the FM interactions."""
    torch.manual_seed(0)
    layer = WukongLayer(n_in, d=8, n_F=n_F, n_L=n_L, k=4, mlp_width=16)
    x = torch.randn(5, n_in, 8, requires_grad=True)
    grads = []
    for reference in (True, False):
        layer.reference = layer.fmb.reference = reference
        layer.zero_grad()
        x.grad = None
        out = layer(x)
        (out * torch.linspace(-1, 1, 8)).sum().backward()
        grads.append((out.detach(), x.grad, *(p.grad for p in layer.parameters())))
    for ref, new in zip(*grads, strict=True):
        torch.testing.assert_close(new, ref, **CLOSE)


# ----------------------------------------------------------------------------- the model
def outputs_and_grads(model: torch.nn.Module, batch) -> tuple[dict, dict]:
    model.zero_grad()
    out = model(batch)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(out.logits, batch.labels)
    (loss + sum(r.square().mean() for r in out.repr.values())).backward()
    values = {"logits": out.logits.detach(), **{k: v.detach() for k, v in out.repr.items()}}
    return values, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("cls", "overrides"), [
    (GEM, {}),
    (GEM, {"max_history": 256, "pyramid_shrink": 4.0}),
    (GEM, {"use_wukong": False}),
    (GEM, {"fused_lookup": False}),
    (GEM, {"head_type": "domain_gated", "n_experts": 3}),
    (DomainFM, {}),
])
def test_fast_paths_give_the_reference_outputs_and_gradients(cls, overrides):
    schema = tiny_schema()
    torch.manual_seed(0)
    model = cls(schema, **{**TINY, **overrides}).train()
    for batch in (random_batch(schema, b=64, seed=0),
                  batch_from_lengths(schema, torch.tensor([300, 5, 0, 40, 9, 8] * 4), seed=1)):
        set_reference_paths(model)
        ref_out, ref_grads = outputs_and_grads(model, batch)
        set_reference_paths(model, on=False)
        out, grads = outputs_and_grads(model, batch)
        assert out.keys() == ref_out.keys() and grads.keys() == ref_grads.keys()
        for k in ref_out:
            torch.testing.assert_close(out[k], ref_out[k], **CLOSE, msg=k)
        for k in ref_grads:
            torch.testing.assert_close(grads[k], ref_grads[k], **CLOSE, msg=k)


def test_fast_paths_are_on_by_default_and_switch_back():
    model = GEM(tiny_schema(), **TINY)
    attns = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    wukong = [m for m in model.modules()
              if isinstance(m, WukongLayer | FactorizationMachineBlock)]
    assert wukong and attns
    assert model.pyramid.trim and not any(on_reference_paths(a) for a in attns)
    assert not any(w.reference for w in wukong)
    set_reference_paths(model)
    assert not model.pyramid.trim and all(on_reference_paths(a) for a in attns)
    assert all(w.reference for w in wukong)
    set_reference_paths(model, on=False)
    assert model.pyramid.trim and not any(on_reference_paths(a) for a in attns)
    assert not any(w.reference for w in wukong)


def test_training_on_the_fast_paths_gives_the_reference_weights():
    """A few AdamW steps from the same start: the same weights (rounding apart)."""
    schema = tiny_schema()
    batches = [random_batch(schema, b=48, seed=s) for s in range(4)]
    weights = []
    for reference in (True, False):
        torch.manual_seed(0)
        model = GEM(schema, **TINY).train()
        set_reference_paths(model, on=reference)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for batch in batches:
            opt.zero_grad()
            out = model(batch)
            torch.nn.functional.binary_cross_entropy_with_logits(out.logits,
                                                                 batch.labels).backward()
            opt.step()
        weights.append(model.state_dict())
    for k, ref in weights[0].items():
        torch.testing.assert_close(weights[1][k], ref, atol=1e-5, rtol=1e-4, msg=k)

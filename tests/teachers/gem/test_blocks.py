"""Unit tests of the GEM building blocks: embeddings, Wukong, pyramid, InterFormer, heads."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from gemkd.teachers.gem.embeddings import FeatureEmbeddings, HashedEmbedding
from gemkd.teachers.gem.heads import DomainGatedHeads, DomainTaskHeads
from gemkd.teachers.gem.interformer import InterFormerLayer, SequenceSummary
from gemkd.teachers.gem.pyramid import (
    PyramidCompressor,
    layer_token_budgets,
    pyramid_token_count,
)
from gemkd.teachers.gem.wukong import FactorizationMachineBlock, TokenMix, WukongLayer
from gemkd.transfer.data.schema import Feature
from gemkd.transfer.errors import ConfigError
from tests.teachers.helpers import random_batch, tiny_schema


def offsets_of(lengths: list[int]) -> torch.Tensor:
    out = torch.zeros(len(lengths) + 1, dtype=torch.long)
    out[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.long), 0)
    return out


# ----------------------------------------------------------------------------- embeddings
def test_embeddings_shapes_hashing_and_shared_tables():
    schema = tiny_schema()
    emb = FeatureEmbeddings(schema, d=8, max_rows=100, n_dense_tokens=2)
    batch = random_batch(schema, b=16)
    toks = emb.tokens(batch)
    assert toks.shape == (16, len(schema.categorical) + 2 + 1, 8) == (16, emb.n_tokens, 8)
    # tables: min(cardinality, max_rows) rows; ids hashed modulo the row count
    assert emb.tables["user_id"].num_embeddings == 100
    assert emb.tables["device"].num_embeddings == 4
    t = emb.tables["user_id"]
    ids = torch.tensor([3, 103, -97])
    assert torch.equal(t(ids)[0], t(ids)[1]) and torch.equal(t(ids)[0], t(ids)[2])
    # default sharing: item ids use the ad-id table, categories the ad-category table
    assert emb.table_for("hist_item_id") is emb.tables["ad_id"]
    assert emb.table_for("hist_category") is emb.tables["ad_category"]
    assert set(emb.seq_tables) == {"hist_action", "hist_age"}
    ev = emb.events(batch.seq_values)
    n = int(batch.seq_offsets[-1])
    assert ev.shape == (n, 8)
    expected = sum(emb.table_for(f)(batch.seq_values[f][:5]) for f in emb.seq_names)
    torch.testing.assert_close(ev[:5], expected)
    tables = emb.embedding_tables()
    assert len(tables) == len({id(t) for t in tables.values()}) == 8 + 2 + 1
    assert all(isinstance(t, HashedEmbedding) for t in tables.values())
    assert tables["ad_id"] is emb.tables["ad_id"] and tables["domain"] is emb.domain


def test_shared_tables_config_is_validated():
    schema = tiny_schema()
    emb = FeatureEmbeddings(schema, d=4, shared_tables={})
    assert set(emb.seq_tables) == {f.name for f in schema.sequence}
    with pytest.raises(ConfigError, match="not a categorical feature"):
        FeatureEmbeddings(schema, d=4, shared_tables={"hist_item_id": "item"})
    with pytest.raises(ConfigError, match="not a sequence field"):
        FeatureEmbeddings(schema, d=4, shared_tables={"hist_ad": "ad_id"})


# ----------------------------------------------------------------------------- Wukong
def test_fmb_interactions_equal_naive_fm():
    torch.manual_seed(0)
    n, d, k = 7, 5, 3
    fmb = FactorizationMachineBlock(n, d, k, n_F=4, mlp_width=16).double()
    x = torch.randn(6, n, d, dtype=torch.float64)
    naive = torch.einsum("bnd,bmd->bnm", x, x) @ fmb.Y  # (X Xᵀ) Y, O(n²d)
    torch.testing.assert_close(fmb.interactions(x), naive)
    manual = fmb.mlp(fmb.norm(naive.flatten(1))).view(6, 4, d)
    torch.testing.assert_close(fmb(x), manual)


def test_wukong_layer_residual_projection():
    torch.manual_seed(0)
    x = torch.randn(4, 6, 8)
    same = WukongLayer(n_in=6, d=8, n_F=3, n_L=3, k=2, mlp_width=16)
    assert same.residual_proj is None
    y = same(x)
    manual = same.norm(torch.cat([same.fmb(x), same.lcb(x)], 1) + x)
    torch.testing.assert_close(y, manual)

    changed = WukongLayer(n_in=6, d=8, n_F=2, n_L=3, k=2, mlp_width=16)
    assert isinstance(changed.residual_proj, TokenMix)
    y = changed(x)
    assert y.shape == (4, 5, 8)
    res = changed.residual_proj.weight @ x
    manual = changed.norm(torch.cat([changed.fmb(x), changed.lcb(x)], 1) + res)
    torch.testing.assert_close(y, manual)
    y.square().sum().backward()
    assert changed.residual_proj.weight.grad.abs().sum() > 0


def test_lcb_is_linear_recombination_of_tokens():
    torch.manual_seed(0)
    mix = TokenMix(5, 3)
    x = torch.randn(2, 5, 4)
    manual = torch.stack([sum(mix.weight[i, j] * x[:, j] for j in range(5)) for i in range(3)], 1)
    torch.testing.assert_close(mix(x), manual)


# ----------------------------------------------------------------------------- pyramid
def test_pyramid_token_count_grows_logarithmically():
    r, c = 8, 4
    t128, t4096 = pyramid_token_count(128, r, c), pyramid_token_count(4096, r, c)
    assert t128 == 3 * r and t4096 == 6 * r
    # 32x more events cost at most log_c(32)+1 more levels of R tokens
    assert t4096 <= t128 + r * (math.ceil(math.log(4096 / 128, c)) + 1)
    assert t4096 / t128 <= math.log2(4096) / math.log2(128) * 1.25
    for n in (1, 16, 100, 1000, 10_000, 100_000):
        assert pyramid_token_count(n, r, c) <= r * (1 + math.ceil(math.log(n * (c - 1) / r + 1, c)))


def test_pyramid_layout_recent_raw_older_pooled():
    r, c, d = 2, 2, 3
    pyr = PyramidCompressor(d, recent=r, chunk=c, max_history=100)
    lengths = [9, 0, 1]
    events = torch.arange(10 * d, dtype=torch.float32).view(10, d)  # rows 0..8, then 9
    tokens, mask = pyr(events, offsets_of(lengths), max_len=9)
    # 9 events need levels covering 2 + 4 + 8 → T = 3 * r = 6 tokens
    assert tokens.shape == (3, 6, d) and mask.shape == (3, 6)
    pos = pyr.slot.weight[:6].flip(0)
    raw = (tokens - pos) * mask.unsqueeze(-1)
    ev = events[:9]
    # positions from the end: p=0,1 raw; p=2..5 level 1 (chunks {2,3},{4,5}); p=6..8 level 2
    by_p = ev.flip(0)  # by_p[p] is the event p steps back
    expected = torch.stack(
        [
            torch.zeros(d),  # slot 5: level 2 chunk 1 → p 10..13: empty
            by_p[6:9].mean(0),  # slot 4: level 2 chunk 0 → p 6..9 (only 6..8 exist)
            by_p[4:6].mean(0),  # slot 3: level 1 chunk 1
            by_p[2:4].mean(0),  # slot 2: level 1 chunk 0
            by_p[1],  # slot 1
            by_p[0],  # slot 0
        ]
    )
    torch.testing.assert_close(raw[0], expected)
    assert mask[0].tolist() == [False, True, True, True, True, True]
    assert not mask[1].any() and tokens[1].abs().sum() == 0  # empty history: all padding
    assert mask[2].tolist() == [False] * 5 + [True]
    torch.testing.assert_close(raw[2, -1], events[9])


def test_pyramid_shapes_for_long_histories_are_logarithmic():
    torch.manual_seed(0)
    d, b = 8, 4
    pyr = PyramidCompressor(d, recent=8, chunk=4, max_history=8192)
    shapes = {}
    for n in (128, 4096):
        ev = torch.randn(b * n, d)
        tokens, mask = pyr(ev, offsets_of([n] * b), max_len=n)
        # filled tokens: 8 raw, then 8 chunks per full level, the last level partially
        assert mask.sum(1).tolist() == [{128: 8 + 8 + 6, 4096: 8 * 5 + 2}[n]] * b
        shapes[n] = tokens.shape
    assert shapes[128] == (b, 24, d) and shapes[4096] == (b, 48, d)  # 32x events, 2x tokens
    # each layer above sees at most as many tokens as the one below
    budgets = layer_token_budgets(pyr.max_tokens, 8, 2.0, 4)
    assert budgets == sorted(budgets, reverse=True) and budgets[-1] >= 8


def test_fused_bag_lookup_equals_segment_mean_of_events():
    torch.manual_seed(0)
    schema = tiny_schema()
    emb = FeatureEmbeddings(schema, d=8, max_rows=100)
    pyr = PyramidCompressor(8, recent=4, chunk=3, max_history=4096)
    batch = random_batch(schema, b=16)
    n = int(batch.seq_offsets[-1])
    tok_a, mask_a = pyr(emb.events(batch.seq_values), batch.seq_offsets, batch.seq_max_len)
    (tok_a * torch.linspace(0, 1, 8)).sum().backward()
    grads_a = [p.grad.clone() for p in emb.parameters() if p.grad is not None]
    emb.zero_grad()
    chunks, t = pyr.segments(batch.seq_offsets, n, batch.seq_max_len)
    tok_b, mask_b = pyr.tokens(emb.events(batch.seq_values, bag_offsets=chunks), chunks, t)
    (tok_b * torch.linspace(0, 1, 8)).sum().backward()
    grads_b = [p.grad.clone() for p in emb.parameters() if p.grad is not None]
    assert torch.equal(mask_a, mask_b)
    torch.testing.assert_close(tok_a, tok_b)
    assert len(grads_a) == len(grads_b) == 4  # two shared tables + two sequence-only tables
    for ga, gb in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(ga, gb, atol=1e-4, rtol=1e-4)  # summation order differs


# ----------------------------------------------------------------------------- InterFormer
def _interformer(summarize: bool = True) -> InterFormerLayer:
    return InterFormerLayer(
        n_x=5,
        d=8,
        n_heads=2,
        n_cls=2,
        n_xsum=2,
        n_pma=2,
        n_recent=3,
        mlp_width=16,
        summarize=summarize,
    )


def test_interformer_padding_never_changes_outputs():
    torch.manual_seed(0)
    layer = _interformer().eval()
    b, t, d = 4, 10, 8
    x, cls = torch.randn(b, 5, d), torch.randn(b, 2, d)
    lengths = torch.tensor([10, 4, 0, 1])
    mask = torch.arange(t).flip(0).unsqueeze(0) < lengths.unsqueeze(1)  # right-aligned
    s = torch.randn(b, t, d) * mask.unsqueeze(-1)
    garbage = s + torch.randn(b, t, d) * 100 * (~mask).unsqueeze(-1)
    out1 = layer(x, s, mask, cls)
    out2 = layer(x, garbage, mask, cls)
    for a, c in zip(out1, out2, strict=True):
        torch.testing.assert_close(a, c)
    s_new, cls_new, s_sum = out1
    assert s_new.shape == (b, t, d) and cls_new.shape == (b, 2, d)
    assert s_sum.shape == (b, 2 + 2 + 3, d)
    assert (s_new * (~mask).unsqueeze(-1)).abs().sum() == 0  # padding stays zero
    assert torch.isfinite(s_sum).all()  # including the empty history (row 2)
    # a longer padded tensor (more empty slots on the left) gives the same outputs
    wide = torch.cat([torch.zeros(b, 5, d), s], 1)
    wide_mask = torch.cat([torch.zeros(b, 5, dtype=torch.bool), mask], 1)
    s_w, cls_w, sum_w = layer(x, wide, wide_mask, cls)
    torch.testing.assert_close(s_w[:, 5:], s_new, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cls_w, cls_new, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sum_w, s_sum, atol=1e-5, rtol=1e-5)


def test_interformer_both_directions():
    torch.manual_seed(0)
    layer = _interformer().eval()
    b, t, d = 3, 6, 8
    x, cls = torch.randn(b, 5, d), torch.randn(b, 2, d)
    mask = torch.ones(b, t, dtype=torch.bool)
    s = torch.randn(b, t, d)
    s1, cls1, sum1 = layer(x, s, mask, cls)
    # the non-sequence tokens condition the sequence ...
    s2, cls2, sum2 = layer(x + torch.randn_like(x), s, mask, cls)
    assert not torch.allclose(s1, s2) and not torch.allclose(cls1, cls2)
    # ... and the sequence reaches the summary handed to the next Wukong layer
    _, _, sum3 = layer(x, s + torch.randn_like(s), mask, cls)
    assert not torch.allclose(sum1, sum3)
    assert _interformer(summarize=False)(x, s, mask, cls)[2] is None


def test_sequence_summary_empty_and_recent():
    torch.manual_seed(0)
    summ = SequenceSummary(d=8, n_heads=2, n_cls=1, n_pma=2, n_recent=2)
    cls = torch.randn(2, 1, 8)
    s = torch.zeros(2, 5, 8)
    s[0, -1] = 1.0
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, -1] = True
    out = summ(cls, s, mask)
    assert out.shape == (2, 5, 8) and torch.isfinite(out).all()
    assert out[1, -2:].abs().sum() == 0  # no recent events → zero "recent" tokens


# ----------------------------------------------------------------------------- heads
def test_domain_task_heads_route_by_domain():
    torch.manual_seed(0)
    heads = DomainTaskHeads(in_dim=6, n_domains=3, n_tasks=2, hidden=4)
    x = torch.randn(5, 6)
    domain = torch.tensor([0, 1, 2, 1, 0])
    out = heads(x, domain)
    assert out.shape == (5, 2)
    for dom in range(3):
        full = heads(x, torch.full((5,), dom))
        rows = domain == dom
        torch.testing.assert_close(out[rows], full[rows])
    assert not torch.allclose(
        heads(x, torch.zeros(5, dtype=torch.long)), heads(x, torch.ones(5, dtype=torch.long))
    )


def test_domain_gated_heads():
    torch.manual_seed(0)
    heads = DomainGatedHeads(in_dim=6, n_domains=3, n_tasks=2, hidden=4, n_experts=3)
    x = torch.randn(5, 6)
    out = heads(x, torch.tensor([0, 1, 2, 1, 0]))
    assert out.shape == (5, 2) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in heads.parameters())


def test_pyramid_understated_max_len_never_leaks_across_examples():
    torch.manual_seed(0)
    pyr = PyramidCompressor(4, recent=2, chunk=2, max_history=100)
    events = torch.randn(30, 4)
    offsets = offsets_of([25, 5])
    honest, _ = pyr(events, offsets, max_len=25)
    short, mask = pyr(events, offsets, max_len=5)  # contract violation: 25 > 5
    assert short.shape[1] < honest.shape[1]
    torch.testing.assert_close(short[1], honest[1, -short.shape[1] :])
    assert torch.isfinite(short).all() and mask[0].all()


def test_shared_table_holds_every_id_mapped_onto_it():
    """hist_item_id's ids run past the ads (content items): the shared ad_id table is sized by
    the larger cardinality, so an item id and an ad id never land on one row by the modulo."""
    base = tiny_schema()
    seq = [Feature(f.name, 700) if f.name == "hist_item_id" else f for f in base.sequence]
    schema = dataclasses.replace(base, sequence=seq)
    emb = FeatureEmbeddings(schema, d=4)
    assert emb.tables["ad_id"].num_embeddings == 700
    assert emb.table_for("hist_item_id") is emb.tables["ad_id"]
    t = emb.tables["ad_id"]
    assert not torch.equal(t(torch.tensor([50]))[0], t(torch.tensor([350]))[0])
    assert FeatureEmbeddings(schema, d=4, max_rows=500).tables["ad_id"].num_embeddings == 500
    assert FeatureEmbeddings(schema, d=4, shared_tables={}).tables["ad_id"].num_embeddings == 300

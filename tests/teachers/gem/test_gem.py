"""The GEM teacher and the domain FM: forward contract, gradients, ablations, masks, configs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from gemkd.teachers import GEM, DomainFM
from gemkd.teachers.gem.embeddings import HashedEmbedding
from gemkd.teachers.gem.interformer import InterFormerLayer
from gemkd.teachers.gem.wukong import WukongLayer
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import TeacherOutput
from tests.teachers.helpers import (
    TINY,
    batch_from_lengths,
    random_batch,
    select,
    tiny_schema,
)

CONFIGS = Path(__file__).resolve().parents[3] / "experiments" / "teacher" / "configs"
ATOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def schema():
    return tiny_schema()


@pytest.fixture(scope="module")
def batch(schema):
    return random_batch(schema, b=64, seed=0)


def build(schema, cls=GEM, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(schema, **{**TINY, **overrides}).eval()


def logits(model, batch):
    with torch.no_grad():
        return model(batch).logits


def test_forward_contract(schema, batch):
    model = build(schema)
    out = model(batch)
    assert isinstance(out, TeacherOutput)
    assert out.logits.shape == (64, 3) and out.logits.dtype == torch.float32
    assert torch.isfinite(out.logits).all()
    names = model.representation_names()
    assert names == ["cross.0", "wukong.0", "cross.1", "wukong.1", "sequence", "trunk"]
    assert list(out.repr) == names
    dims = model.representation_dims()
    for name, r in out.repr.items():
        assert r.shape == (64, dims[name]), name
        assert r.dtype == torch.float32 and torch.isfinite(r).all(), name
    assert dims["wukong.0"] == (TINY["n_F"] + TINY["n_L"]) * TINY["d"]


@pytest.mark.parametrize("head_type", ["domain_task", "domain_gated"])
def test_gradients_reach_every_parameter(schema, batch, head_type):
    model = build(schema, head_type=head_type).train()
    assert batch.seq_max_len > 1000 and (batch.seq_lengths == 0).any()
    out = model(batch)
    torch.nn.functional.binary_cross_entropy_with_logits(out.logits, batch.labels).backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not dead, dead


def test_ablations_remove_an_arm(schema, batch):
    full = build(schema)
    wukong_only = build(schema, use_sequence=False)
    seq_only = build(schema, use_wukong=False)
    n_full = full.num_parameters()
    assert wukong_only.num_parameters() < n_full and seq_only.num_parameters() < n_full
    assert not any(isinstance(m, InterFormerLayer) for m in wukong_only.modules())
    assert not hasattr(wukong_only, "pyramid") and len(wukong_only.embeddings.seq_tables) == 0
    assert not any(isinstance(m, WukongLayer) for m in seq_only.modules())
    assert wukong_only.representation_names() == ["wukong.0", "wukong.1", "trunk"]
    assert seq_only.representation_names() == ["cross.0", "cross.1", "sequence", "trunk"]
    for model in (wukong_only, seq_only):
        model.train()
        out = model(batch)
        assert out.logits.shape == (64, 3) and torch.isfinite(out.logits).all()
        dims = model.representation_dims()
        assert {k: v.shape[1] for k, v in out.repr.items()} == dims
        out.logits.sum().backward()
        dead = [n for n, p in model.named_parameters() if p.grad is None]
        assert not dead, dead
    # Wukong-only ignores the histories entirely
    empty = replace(
        batch,
        seq_values={n: v[:0] for n, v in batch.seq_values.items()},
        seq_offsets=torch.zeros_like(batch.seq_offsets),
        seq_max_len=0,
    )
    torch.testing.assert_close(logits(wukong_only.eval(), batch), logits(wukong_only, empty))
    with pytest.raises(ConfigError, match="both false"):
        GEM(schema, use_wukong=False, use_sequence=False)


def test_padding_and_batch_mates_do_not_change_outputs(schema, batch):
    model = build(schema)
    ref = logits(model, batch)
    # a longer seq_max_len only adds padding slots
    padded = replace(batch, seq_max_len=batch.seq_max_len + 700)
    torch.testing.assert_close(logits(model, padded), ref, **ATOL)
    # dropping the 3000-event history (so the batch's padded width shrinks) changes no other row
    rows = [i for i in range(64) if i != 1]
    torch.testing.assert_close(logits(model, select(batch, rows)), ref[rows], **ATOL)
    # permuting the batch permutes the outputs
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(0)).tolist()
    torch.testing.assert_close(logits(model, select(batch, perm)), ref[perm], **ATOL)


def test_fused_lookup_matches_events_then_segment_mean(schema, batch):
    fused, unfused = build(schema), build(schema, fused_lookup=False)
    torch.testing.assert_close(logits(fused, batch), logits(unfused, batch), **ATOL)


def test_truncation_keeps_the_most_recent_events(schema):
    k = 50
    model = build(schema, max_history=k)
    lengths = torch.tensor([200, 10, 0, 51, 50, 120])
    long = batch_from_lengths(schema, lengths, seed=3)
    # the same examples with only their last k events
    keep = torch.cat(
        [
            torch.arange(int(e) - min(int(e - s), k), int(e))
            for s, e in zip(long.seq_offsets[:-1], long.seq_offsets[1:], strict=True)
        ]
    )
    kept_len = lengths.clamp(max=k)
    offsets = torch.zeros(7, dtype=torch.long)
    offsets[1:] = torch.cumsum(kept_len, 0)
    short = replace(
        long,
        seq_values={n: v[keep] for n, v in long.seq_values.items()},
        seq_offsets=offsets,
        seq_max_len=int(kept_len.max()),
    )
    ref = logits(model, long)
    torch.testing.assert_close(logits(model, short), ref, **ATOL)
    # an old event (beyond k) does not matter, the most recent one does
    for pos, should_change in ((0, False), (199, True)):
        vals = {n: v.clone() for n, v in long.seq_values.items()}
        vals["hist_item_id"][pos] += 1
        vals["hist_action"][pos] = (vals["hist_action"][pos] + 1) % 4
        out = logits(model, replace(long, seq_values=vals))
        assert torch.allclose(out[1:], ref[1:], **ATOL)
        assert torch.allclose(out[0], ref[0], **ATOL) != should_change


def test_all_histories_empty(schema):
    model = build(schema).train()
    empty = batch_from_lengths(schema, torch.zeros(16, dtype=torch.long), seed=1)
    assert empty.seq_values["hist_item_id"].numel() == 0 and empty.seq_max_len == 0
    out = model(empty)
    assert out.logits.shape == (16, 3) and torch.isfinite(out.logits).all()
    assert all(torch.isfinite(r).all() for r in out.repr.values())
    out.logits.sum().backward()


def test_deterministic_under_fixed_seed(schema, batch):
    a, b = build(schema, seed=7, dropout=0.1), build(schema, seed=7, dropout=0.1)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert na == nb and torch.equal(pa, pb), na
    assert torch.equal(logits(a, batch), logits(b, batch))
    a.train(), b.train()
    torch.manual_seed(1)
    out_a = a(batch).logits
    torch.manual_seed(1)
    out_b = b(batch).logits
    assert torch.equal(out_a, out_b)
    assert not torch.equal(build(schema, seed=8).state_dict()["cls"], a.state_dict()["cls"])


def test_fsdp_units(schema):
    model = build(schema)
    assert set(GEM.fsdp_wrap_modules()) == {HashedEmbedding, WukongLayer, InterFormerLayer}
    units = model.fsdp_units()
    assert sum(isinstance(m, WukongLayer) for m in units) == 2
    assert sum(isinstance(m, InterFormerLayer) for m in units) == 2
    tables = [m for m in units if isinstance(m, HashedEmbedding)]
    assert len({id(t) for t in tables}) == len(tables) == len(model.embeddings.embedding_tables())
    # units are disjoint (no unit nested in another), as fully_shard needs
    owned = [id(p) for m in units for p in m.parameters()]
    assert len(owned) == len(set(owned))


def test_bf16_autocast(schema, batch):
    model = build(schema)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch)
    assert out.logits.dtype == torch.float32 and torch.isfinite(out.logits).all()


@pytest.mark.parametrize("name", ["tiny", "small", "base", "domain_fm"])
def test_yaml_configs_build(schema, name):
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    flat = {k: v for k, v in cfg.items() if k != "model"}
    assert not any(isinstance(v, dict) for v in flat.values()), "only `model:` may nest"
    cls = DomainFM if name == "domain_fm" else GEM
    assert set(cfg["model"]) <= set(cls.hparam_names())
    torch.manual_seed(0)
    model = cls.from_config(schema, cfg["model"]).eval()
    small = random_batch(schema, b=8, seed=2)
    assert logits(model, small).shape == (8, 3)


def test_param_counts_increase_with_size(schema):
    counts = {}
    for name in ("tiny", "small", "base"):
        cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
        counts[name] = GEM.from_config(schema, cfg["model"]).num_parameters()
    assert counts["tiny"] < counts["small"] < counts["base"]


def test_config_errors(schema):
    with pytest.raises(ConfigError, match="unknown model key"):
        GEM.from_config(schema, {"d": 8, "n_layer": 2})
    with pytest.raises(ConfigError, match="divisible"):
        GEM(schema, d=10, n_heads=4)
    with pytest.raises(ConfigError, match="n_recent"):
        GEM(schema, n_recent=20, pyramid_recent=8)
    with pytest.raises(ConfigError, match="head_type"):
        GEM(schema, head_type="mmoe")


def test_domain_fm_contract(schema, batch):
    torch.manual_seed(0)
    fm = DomainFM(schema)
    gem = GEM(schema)
    assert fm.num_parameters() < gem.num_parameters()
    out = fm.eval()(batch)
    assert out.logits.shape == (64, 3)
    assert {k: v.shape[1] for k, v in out.repr.items()} == fm.representation_dims()
    assert "trunk" in fm.representation_names() and "sequence" in fm.representation_names()
    # specialised to one domain: every example is scored by that domain's heads
    one = build(schema, cls=DomainFM, domain=1)
    assert one.domain_id == 1 and one.config.domain_token is False
    moved = replace(batch, domain=torch.zeros_like(batch.domain))
    torch.testing.assert_close(logits(one, batch), logits(one, moved))
    assert "domain" in DomainFM.hparam_names()
    with pytest.raises(ConfigError, match="domain"):
        DomainFM(schema, domain=5)

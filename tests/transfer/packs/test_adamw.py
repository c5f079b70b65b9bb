"""A pack's optimiser and weight average give each member its own run's values, bit for bit:
the foreach form torch's AdamW(foreach) and StreamEMA's values (an exact pack: Lightning's run),
the fused form torch's AdamW(fused=True) and a lerp average, whatever the pack's size."""

from __future__ import annotations

import pytest
import torch

from gemkd.transfer.packs.adamw import MemberGroup, PackAdamW
from gemkd.transfer.packs.pack_ema import PackEMA
from gemkd.transfer.training.ema import _host_weight
from gemkd.transfer.training.flat_adamw import FlatAdamW

SHAPES = [(5, 4), (7,), (3, 2, 2)]
LRS = [[0.01, 0.02, 0.0123], [0.1, 0.2, 0.123], [0.01, 0.02, 0.0123]]
WDS = [[0.0, 0.0, 0.0], [0.0, 0.01, 0.0], [0.0, 0.0, 0.0]]


def _data(k: int = 3, steps: int = 12):
    torch.manual_seed(0)
    init = [torch.randn(k, *s) for s in SHAPES]
    grads = [[torch.randn(k, *s) for s in SHAPES] for _ in range(steps)]
    return init, grads


def _train_pack(init, grads, fused: bool, k: int = 3) -> list[torch.Tensor]:
    stacked = [t[:k].clone().requires_grad_() for t in init]
    opt = PackAdamW(stacked, [MemberGroup(lr[:k], wd[:k]) for lr, wd in zip(LRS, WDS,
                                                                             strict=True)],
                    fused=fused)
    for g in grads:
        opt.zero_grad()
        for p, gg in zip(stacked, g, strict=True):
            p.grad = gg[:k].clone()
        opt.step()
    assert opt.step_count == len(grads)
    return [p.detach() for p in stacked]


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_each_member_takes_its_own_adamw_update(fused):
    init, grads = _data()
    packed = _train_pack(init, grads, fused)
    for k in range(3):
        own = [init[i][k].clone().requires_grad_() for i in range(3)]
        ref = torch.optim.AdamW([{"params": [own[i]], "lr": LRS[i][k],
                                  "weight_decay": WDS[i][k]} for i in range(3)],
                                **({"fused": True} if fused else {"foreach": True}))
        for g in grads:
            for i in range(3):
                own[i].grad = g[i][k].clone()
            ref.step()
        for i in range(3):
            assert torch.equal(own[i].detach(), packed[i][k]), (k, i)


def test_a_fused_member_does_not_depend_on_its_pack():
    """Member 0 of a pack of three equals the same member alone (a pack of one), bit for bit."""
    init, grads = _data(steps=20)
    alone = _train_pack(init, grads, fused=True, k=1)
    packed = _train_pack(init, grads, fused=True, k=3)
    assert all(torch.equal(a[0], p[0]) for a, p in zip(alone, packed, strict=True))
    assert not all(torch.equal(p[0], p[1]) for p in packed)  # the members did differ


def test_leaves_are_the_members_own_parameters():
    init, grads = _data(k=2, steps=4)
    leaves = [[init[i][k].clone().requires_grad_() for k in range(2)] for i in range(3)]
    holders = [t.clone() for t in init]
    groups = [MemberGroup(lr[:2], [0.0, 0.0]) for lr in LRS]
    opt = PackAdamW(holders, groups, leaves=leaves)
    refs = [FlatAdamW([{"params": [init[i][k].clone().requires_grad_()], "lr": LRS[i][k],
                        "weight_decay": 0.0}], lr=0.01) for i in range(3) for k in range(2)]
    for g in grads:
        opt.zero_grad()
        for i in range(3):
            for k in range(2):
                leaves[i][k].grad = g[i][k].clone()
                ref = refs[i * 2 + k]
                ref.param_groups[0]["params"][0].grad = g[i][k].clone()
                ref.step()
        opt.step()
    for i in range(3):
        for k in range(2):
            want = refs[i * 2 + k].param_groups[0]["params"][0]
            assert torch.equal(leaves[i][k].detach(), want.detach())
            assert leaves[i][k].data_ptr() == holders[i][k].data_ptr()  # a slice of its stack


def test_a_missing_gradient_is_an_error():
    init, _ = _data(k=2)
    stacked = [t[:2].clone().requires_grad_() for t in init]
    opt = PackAdamW(stacked, [MemberGroup([0.1, 0.1], [0.0, 0.0])] * 3)
    with pytest.raises(RuntimeError, match="has no gradient"):
        opt.step()
    with pytest.raises(ValueError, match="members"):
        PackAdamW(stacked, [MemberGroup([0.1], [0.0])] * 3)


def test_members_sharing_lr_and_decay_take_torchs_update():
    """The shared case (one lr and weight decay for every member) is exact too."""
    init, grads = _data(k=2, steps=6)
    stacked = [t.clone().requires_grad_() for t in init]
    opt = PackAdamW(stacked, [MemberGroup([0.03, 0.03], [0.01, 0.01])] * 3)
    own = [[init[i][k].clone().requires_grad_() for i in range(3)] for k in range(2)]
    refs = [torch.optim.AdamW(own[k], lr=0.03, weight_decay=0.01, foreach=True)
            for k in range(2)]
    for g in grads:
        for i, p in enumerate(stacked):
            p.grad = g[i].clone()
            for k in range(2):
                own[k][i].grad = g[i][k].clone()
        opt.step()
        for ref in refs:
            ref.step()
    for k in range(2):
        for i in range(3):
            assert torch.equal(own[k][i].detach(), stacked[i][k].detach()), (k, i)


@pytest.mark.parametrize("lerp", [False, True], ids=["stream_ema", "lerp"])
def test_each_member_averages_at_its_own_decay(lerp):
    torch.manual_seed(1)
    weights = [torch.zeros(2, 3), torch.zeros(2, 4, 2)]
    decays = [0.9, 0.5]
    ema = PackEMA(weights, decays, lerp=lerp)
    avg: list[list[torch.Tensor]] = [[], []]
    for n in range(15):
        for w in weights:
            w.copy_(torch.randn_like(w))
        ema.update()
        for k, decay in enumerate(decays):
            cur = [w[k].clone() for w in weights]
            h = _host_weight(decay, n, torch.float32)
            if n == 0:
                avg[k] = cur
            elif lerp:
                avg[k] = [a.lerp(c, h) for a, c in zip(avg[k], cur, strict=True)]
            else:
                avg[k] = [a + (c - a) * h for a, c in zip(avg[k], cur, strict=True)]
    for k in range(2):
        for i in range(2):
            assert torch.equal(ema.average[i][k], avg[k][i]), (k, i)
    ema.put_in_place()
    assert all(torch.equal(w, a) for w, a in zip(weights, ema.average, strict=True))
    with pytest.raises(ValueError, match="decay"):
        PackEMA(weights, [1.5, 0.5])
    with pytest.raises(ValueError, match="one decay per member"):
        PackEMA(weights, [0.9])

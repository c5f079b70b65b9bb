"""A pack's optimiser and weight average give each member its own run's values, bit for bit."""

from __future__ import annotations

import pytest
import torch

from gemkd.transfer.training.ema import _host_weight
from gemkd.transfer.training.flat_adamw import FlatAdamW
from gemkd.transfer.training.pack_adamw import MemberGroup, PackAdamW
from gemkd.transfer.training.pack_ema import PackEMA

SHAPES = [(5, 4), (7,), (3, 2, 2)]
LRS = [[0.01, 0.02, 0.0123], [0.1, 0.2, 0.123], [0.01, 0.02, 0.0123]]
WDS = [[0.0, 0.0, 0.0], [0.0, 0.01, 0.0], [0.0, 0.0, 0.0]]


def _data(k: int = 3, steps: int = 12):
    torch.manual_seed(0)
    init = [torch.randn(k, *s) for s in SHAPES]
    grads = [[torch.randn(k, *s) for s in SHAPES] for _ in range(steps)]
    return init, grads


def test_each_member_takes_its_own_adamw_update():
    init, grads = _data()
    stacked = [t.clone().requires_grad_() for t in init]
    opt = PackAdamW(stacked, [MemberGroup(lr, wd) for lr, wd in zip(LRS, WDS, strict=True)])
    for g in grads:
        for p, gg in zip(stacked, g, strict=True):
            p.grad = gg.clone()
        opt.step()
    for k in range(3):
        own = [init[i][k].clone().requires_grad_() for i in range(3)]
        ref = torch.optim.AdamW([{"params": [own[i]], "lr": LRS[i][k],
                                  "weight_decay": WDS[i][k]} for i in range(3)], foreach=True)
        for g in grads:
            for i in range(3):
                own[i].grad = g[i][k].clone()
            ref.step()
        for i in range(3):
            assert torch.equal(own[i].detach(), stacked[i][k].detach()), (k, i)
    assert opt.step_count == len(grads)


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
            assert leaves[i][k].data_ptr() == holders[i][k].data_ptr()  # a slice of the buffer


def test_a_missing_gradient_is_an_error():
    init, _ = _data(k=2)
    stacked = [t[:2].clone().requires_grad_() for t in init]
    opt = PackAdamW(stacked, [MemberGroup([0.1, 0.1], [0.0, 0.0])] * 3)
    with pytest.raises(RuntimeError, match="has no gradient"):
        opt.step()
    with pytest.raises(ValueError, match="members"):
        PackAdamW(stacked, [MemberGroup([0.1], [0.0])] * 3)


def test_each_member_averages_at_its_own_decay():
    torch.manual_seed(1)
    data = torch.zeros(6)
    member = torch.tensor([0, 0, 0, 1, 1, 1])
    ema = PackEMA(data, member, [0.9, 0.5])
    avg = [None, None]
    for n in range(15):
        data.copy_(torch.randn(6))
        ema.update()
        for k, decay in enumerate((0.9, 0.5)):
            cur = data[3 * k:3 * k + 3].clone()
            if n == 0:
                avg[k] = cur
            else:
                avg[k] = avg[k] + (cur - avg[k]) * _host_weight(decay, n, torch.float32)
    assert torch.equal(ema.average, torch.cat(avg))
    with pytest.raises(ValueError, match="decay"):
        PackEMA(data, member, [1.5, 0.5])


def test_members_sharing_lr_and_decay_take_torchs_update():
    """The shared case (one lr and weight decay for every member: a 0-dim step) is exact too."""
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


def test_the_average_follows_each_member_across_parameters():
    """A pack's buffer alternates members parameter by parameter: each run averages at its
    member's decay."""
    torch.manual_seed(2)
    member = torch.tensor([0, 0, 1, 1, 0, 0, 0, 1, 1, 1])
    data = torch.zeros(10)
    ema = PackEMA(data, member, [0.9, 0.5])
    avg = torch.zeros(10)
    for n in range(8):
        data.copy_(torch.randn(10))
        ema.update()
        w = torch.tensor([_host_weight(d, n, torch.float32) for d in (0.9, 0.5)])[member]
        avg = data.clone() if n == 0 else avg + (data - avg) * w
    assert torch.equal(ema.average, avg)

"""Row-wise table updates: the tables' gradients are row-sparse (the dense ones' rows), only the
touched rows and their optimiser state change, lazy Adam is torch's SparseAdam, row-wise
Adagrad is its formula, the lazy average is the dense average where the formula says, and the
switch is checked."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig
from gemkd.transfer.config import build_dataclass
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.layers import HashedEmbedding
from gemkd.transfer.packs import stacked
from gemkd.transfer.packs.adamw import MemberGroup, PackAdamW
from gemkd.transfer.packs.pack_ema import PackEMA
from gemkd.transfer.training.ema import StreamEMA, _host_weight
from gemkd.transfer.training.flat_adamw import FlatAdamW
from gemkd.transfer.training.lazy_ema import LazyRowAverage
from gemkd.transfer.training.table_optim import (
    clip_grad_norm_,
    lazy_adam_,
    rowwise_adagrad_,
    set_sparse_tables,
    touched_rows,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Model(nn.Module):
    """A table read by a lookup and by bags (the two paths of HashedEmbedding), and a dense
    layer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = HashedEmbedding(30, 4)
        self.linear = nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor, bag_ids: torch.Tensor, offsets: torch.Tensor
                ) -> torch.Tensor:
        x = self.table(ids) + self.table(bag_ids, offsets)
        return self.linear(x).square().sum()


IDS = torch.tensor([3, 7, 3, 40])  # 40 hashes to row 10
BAGS = (torch.tensor([1, 3, 3, 12, 7, 1]), torch.tensor([0, 2, 2, 5, 6]))
TOUCHED = [1, 3, 7, 10, 12]


def _grad(sparse: bool) -> torch.Tensor:
    model = _Model()
    set_sparse_tables(model, sparse, min_rows=0)
    model(IDS, *BAGS).backward()
    assert model.table.weight.grad is not None
    return model.table.weight.grad


def test_sparse_table_gradients_are_the_dense_ones_rows():
    dense, sparse = _grad(False), _grad(True)
    assert sparse.is_sparse and not dense.is_sparse
    rows, values = touched_rows(sparse)
    assert rows.tolist() == TOUCHED
    torch.testing.assert_close(sparse.to_dense(), dense, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(values, dense[TOUCHED], rtol=1e-6, atol=1e-7)
    assert dense[[r for r in range(30) if r not in TOUCHED]].abs().sum() == 0


@pytest.mark.parametrize("rule", ["rowwise_adagrad", "sparse_adam"])
def test_only_touched_rows_and_their_state_change(rule):
    model = _Model()
    set_sparse_tables(model, True, min_rows=0)
    opt = FlatAdamW([{"params": [model.table.weight], "lr": 0.1, "table_rule": rule,
                      "weight_decay": 0.01},
                     {"params": list(model.linear.parameters()), "lr": 0.01}])
    before = model.table.weight.detach().clone()
    dense_before = [p.detach().clone() for p in model.linear.parameters()]
    for _ in range(2):
        opt.zero_grad()
        model(IDS, *BAGS).backward()
        opt.step()
    after = model.table.weight.detach()
    untouched = [r for r in range(30) if r not in TOUCHED]
    assert torch.equal(after[untouched], before[untouched])
    assert (after[TOUCHED] != before[TOUCHED]).all()
    state = opt.state[model.table.weight]
    assert int(state["step"]) == 2
    for key, value in state.items():
        if key != "step":
            rows_state = value if value.dim() == 1 else value.abs().sum(1)
            assert (rows_state[untouched] == 0).all() and (rows_state[TOUCHED] != 0).all(), key
    # the dense weights take AdamW as before
    assert all(not torch.equal(p, q) for p, q in zip(model.linear.parameters(), dense_before,
                                                     strict=True))


def test_lazy_adam_is_torch_sparse_adam():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(12, 3, generator=g)
    ref = w.clone().requires_grad_()
    opt = torch.optim.SparseAdam([ref], lr=0.05)
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for step in range(1, 8):
        rows = torch.randperm(12, generator=g)[:5].sort().values
        grad = torch.randn(5, 3, generator=g)
        lazy_adam_(w, rows, grad, m, v, step, 0.05, (0.9, 0.999), 1e-8)
        ref.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), grad, (12, 3), check_invariants=True)
        opt.step()
    torch.testing.assert_close(w, ref.detach(), rtol=1e-5, atol=1e-6)


def test_rowwise_adagrad_is_its_formula():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(6, 4, generator=g)
    expected, acc = w.clone(), torch.zeros(6)
    state = torch.zeros(6)
    for _ in range(3):
        rows = torch.tensor([0, 4])
        grad = torch.randn(2, 4, generator=g)
        rowwise_adagrad_(w, rows, grad, state, 0.1, 1e-8)
        acc[rows] += grad.square().mean(1)
        expected[rows] -= 0.1 * grad / (acc[rows].sqrt() + 1e-8).unsqueeze(1)
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(state, acc)
    assert state[[1, 2, 3, 5]].eq(0).all()


def test_clip_over_sparse_gradients_is_torchs_on_the_dense_ones():
    sparse, dense = _Model(), _Model()
    set_sparse_tables(sparse, True, min_rows=0)
    for m in (sparse, dense):
        m(IDS, *BAGS).backward()
    n_sparse = clip_grad_norm_(list(sparse.parameters()), 0.05)
    n_dense = torch.nn.utils.clip_grad_norm_(list(dense.parameters()), 0.05)
    torch.testing.assert_close(n_sparse, n_dense)
    for p, q in zip(sparse.parameters(), dense.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        g = p.grad.to_dense() if p.grad.is_sparse else p.grad
        torch.testing.assert_close(g, q.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("members", [1, 3])
def test_the_lazy_average_is_the_dense_average(members):
    """Rows a step did not touch keep their weights, so the dense average's updates of them
    are the missed decays the lazy one applies at once: equal on every row after a flush,
    and on the touched rows at every step."""
    g = torch.Generator().manual_seed(3)
    rows_per, d = 8, 3
    decays = [0.9, 0.95, 0.8][:members]
    weight = torch.randn(members * rows_per, d, generator=g)
    dense = torch.zeros_like(weight)
    lazy = LazyRowAverage(torch.zeros_like(weight), weight, members=members)
    for n in range(25):
        rows = torch.randperm(members * rows_per, generator=g)[:5].sort().values
        lazy.catch_up(rows)
        weight.index_add_(0, rows, torch.randn(5, d, generator=g))
        shares = [_host_weight(dec, n, torch.float32) for dec in decays]
        lazy.update(rows, shares)
        for k, share in enumerate(shares):
            part = slice(k * rows_per, (k + 1) * rows_per)
            dense[part] = weight[part] if n == 0 else \
                dense[part] + (weight[part] - dense[part]) * share
        torch.testing.assert_close(lazy.avg[rows], dense[rows], rtol=1e-5, atol=1e-6)
    lazy.flush()
    torch.testing.assert_close(lazy.avg, dense, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rule", ["rowwise_adagrad", "sparse_adam"])
def test_a_row_wise_pack_member_is_its_pack_of_one(rule):
    """A stacked table's rows at each member's lr and decay: member k of three equals member
    k alone (its weights and lazy average), bit for bit."""
    g = torch.Generator().manual_seed(5)
    init = torch.randn(3, 20, 4, generator=g)
    dense_init = torch.randn(3, 5, generator=g)
    batches = [(torch.randint(0, 20, (6,), generator=g), torch.randint(0, 20, (9,), generator=g),
                torch.randn(3, 6, 4, generator=g)) for _ in range(6)]
    lrs, wds, decays = [0.1, 0.05, 0.2], [0.0, 0.01, 0.0], [0.9, 0.8, 0.95]

    def train(members: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        table = init[members].clone().requires_grad_()
        other = dense_init[members].clone().requires_grad_()
        opt = PackAdamW([table, other], [MemberGroup([lrs[k] for k in members],
                                                     [wds[k] for k in members]),
                                         MemberGroup([0.01] * len(members),
                                                     [0.0] * len(members))],
                        fused=True, rules=[rule, "dense_adamw"])
        ema = PackEMA([table, other], [decays[k] for k in members], lerp=True, lazy={0})
        for ids, bag_ids, w in batches:
            opt.zero_grad()
            out = stacked.lookup(ids, table, sparse=True) \
                + stacked.bag_mean(bag_ids, table, torch.tensor([0, 3, 3, 5, 9, 9, 9]),
                                   sparse=True)
            ((out * w[members]).sum() + other.square().sum()).backward()
            rows = opt.table_rows()
            ema.catch_up(rows)
            opt.step()
            ema.update(rows)
        ema.put_in_place()
        return table.detach(), other.detach()

    table, other = train([0, 1, 2])
    assert not torch.equal(table, init)
    for k in range(3):
        alone_table, alone_other = train([k])
        assert torch.equal(table[k], alone_table[0]), k
        assert torch.equal(other[k], alone_other[0]), k


def test_a_bad_table_optimizer_is_a_config_error():
    with pytest.raises(ConfigError, match="table_optimizer.*rowwise_adagrad"):
        build_dataclass(TeacherTrainConfig, {"table_optimizer": "adagrad"}, "config t")
    with pytest.raises(ConfigError, match="strategy 'fsdp'"):
        build_dataclass(TeacherTrainConfig, {"table_optimizer": "sparse_adam",
                                             "strategy": "fsdp"}, "config t")
    with pytest.raises(ConfigError, match="table_optimizer"):
        spec_from_mapping({"name": "x", "seeds": [0], "table_optimizer": "lazy"})


class _Lit(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = _Model()
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch, idx):
        (ids,) = batch
        return self.model(ids, *BAGS)

    def on_train_batch_end(self, outputs, batch, idx) -> None:
        self.seen.append(self.model.table.weight.detach().clone())

    def configure_optimizers(self):
        set_sparse_tables(self.model, True, min_rows=0)
        return FlatAdamW([{"params": [self.model.table.weight], "lr": 0.1,
                           "table_rule": "sparse_adam"},
                          {"params": list(self.model.linear.parameters()), "lr": 0.01}])


def test_stream_ema_averages_a_row_wise_table_lazily():
    """In a Lightning fit, the lazy average put in place at the end equals the dense average of
    the weights after every step."""
    lit = _Lit()
    ids = torch.randint(0, 30, (40, 1), generator=torch.Generator().manual_seed(6))
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[StreamEMA(0.9)])
    trainer.fit(lit, DataLoader(TensorDataset(ids), batch_size=4))
    expected = lit.seen[0].clone()
    for n, w in enumerate(lit.seen[1:], start=1):
        expected += (w - expected) * _host_weight(0.9, n, torch.float32)
    assert len(lit.seen) == 10
    torch.testing.assert_close(lit.model.table.weight.detach(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rule", ["dense_adamw", "rowwise_adagrad"])
def test_the_module_puts_large_tables_in_a_row_wise_group(rule):
    from gemkd.transfer.training.ranking_module import RankingModule

    model = nn.ModuleDict({"big": HashedEmbedding(1024, 4), "small": HashedEmbedding(10, 4),
                           "slot": nn.Embedding(3, 4), "linear": nn.Linear(4, 1)})
    module = RankingModule(model, ["click"], ["feed"], table_optimizer=rule,
                           init_output_bias=False)
    opt = module.student_optimizer()
    groups = {g["name"]: g for g in opt.param_groups}
    big, small = model["big"], model["small"]
    assert isinstance(big, HashedEmbedding) and isinstance(small, HashedEmbedding)
    if rule == "dense_adamw":  # the reference: every table on dense AdamW, as before
        assert list(groups) == ["embedding", "dense"] and not big.sparse
        assert len(groups["embedding"]["params"]) == 3
        return
    assert list(groups) == ["table", "embedding", "dense"]
    assert groups["table"]["params"] == [big.weight] and groups["table"]["table_rule"] == rule
    assert groups["table"]["lr"] == module.embedding_lr
    assert big.sparse and not small.sparse  # below table_min_rows: dense
    with pytest.raises(ValueError, match="table_optimizer must be one of"):
        RankingModule(model, ["click"], ["feed"], table_optimizer="adam", init_output_bias=False)

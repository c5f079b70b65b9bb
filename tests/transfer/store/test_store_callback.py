"""The store written through Lightning (StoreCallback) and the join checked by hypothesis."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.utils.data import DataLoader, TensorDataset

from gemkd.transfer.store import (
    StoreCallback,
    TeacherJoin,
    TeacherStore,
    quantize_int8,
    weights_hash,
)
from tests.transfer.store.helpers import TASKS, E, make_rows, no_leftovers, write_store, writer_args


# ---- Lightning callback (single process) -----------------------------------------------------
class FakeTeacher(pl.LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, len(TASKS) + E)
        self.fail_at = fail_at

    def forward(self, x):
        return self.net(x)

    def predict_step(self, batch, batch_idx):
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise RuntimeError("teacher died")
        x, example_id, day, domain, user_id, ts = batch
        out = self(x)
        return {"example_id": example_id, "day": day, "domain": domain, "user_id": user_id,
                "ts": ts, "logits": out[:, :len(TASKS)], "emb": out[:, len(TASKS):]}


def fake_loader(n: int = 83) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    ds = TensorDataset(torch.randn(n, 4, generator=g), torch.arange(n) * 3 + 11,
                       torch.arange(n) % 2 + 4, torch.arange(n) % 3, torch.arange(n) % 5,
                       torch.arange(n) + 1000)
    return DataLoader(ds, batch_size=10)


def trainer(cb: StoreCallback, tmp_path: Path) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=[cb],
                      enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)


def test_callback_writes_store(tmp_path):
    model = FakeTeacher()
    cb = StoreCallback(tmp_path / "s", **{k: v for k, v in writer_args(emb_dtype="int8").items()
                                          if k != "teacher_version"},
                       teacher_version=weights_hash(model.state_dict()))
    trainer(cb, tmp_path).predict(model, fake_loader(), return_predictions=False)
    store = TeacherStore(tmp_path / "s")
    assert store.manifest.teacher_version == weights_hash(model.state_dict())
    assert cb.manifest.total_rows == 83 and len(store.manifest.shards) == 3
    x = fake_loader().dataset.tensors[0]
    with torch.no_grad():
        expect = model(x).numpy()
    res = TeacherJoin(store, with_emb=True)(np.arange(83) * 3 + 11)
    assert res.found.all()
    np.testing.assert_allclose(res.logits, expect[:, :3], rtol=1e-6, atol=1e-6)
    scale = np.abs(expect[:, 3:]).max(1, keepdims=True) / 127
    assert (np.abs(res.emb - expect[:, 3:]) <= scale * 0.5 + 1e-6).all()


def test_callback_crash_leaves_no_store(tmp_path):
    cb = StoreCallback(tmp_path / "s", **writer_args())
    with pytest.raises(RuntimeError, match="teacher died"):
        trainer(cb, tmp_path).predict(FakeTeacher(fail_at=6), fake_loader(),
                                      return_predictions=False)
    no_leftovers(tmp_path / "s")


def test_callback_warns_when_predictions_are_kept(tmp_path):
    cb = StoreCallback(tmp_path / "s", **writer_args())
    with pytest.warns(UserWarning, match="return_predictions=False"):
        trainer(cb, tmp_path).predict(FakeTeacher(), fake_loader(20))
    assert TeacherStore(tmp_path / "s").num_rows == 20


# ---- properties ------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12),
                  elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)))
def test_quantize_int8_error_bound(x):
    q, scale = quantize_int8(x)
    assert q.dtype == np.int8 and (np.abs(q.astype(np.int16)) <= 127).all()
    absmax = np.abs(x).max(axis=1)
    np.testing.assert_allclose(scale, absmax / 127, rtol=1e-6)
    err = np.abs(q.astype(np.float32) * scale[:, None] - x)
    assert (err <= (scale * 0.5 + absmax * 1e-6 + 1e-30)[:, None]).all()


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.integers(-2**62, 2**62), min_size=1, max_size=60),
       st.lists(st.integers(-2**62, 2**62), max_size=30), st.randoms(use_true_random=False))
def test_join_matches_dict_lookup(tmp_path_factory, stored, extra, rnd):
    ids = np.array(sorted(stored), dtype=np.int64)
    rnd.shuffle(ids)
    n = len(ids)
    rows = {**{k: v[:n] for k, v in make_rows(n).items()}, "example_id": ids}
    path = tmp_path_factory.mktemp("prop") / "s"
    write_store(path, rows, rows_per_shard=17, row_group_rows=5)
    query = np.array(list(ids[: n // 2]) + extra, dtype=np.int64)
    rnd.shuffle(query)
    res = TeacherJoin(TeacherStore(path), policy="mask")(query)
    expect = {int(i): k for k, i in enumerate(ids)}
    np.testing.assert_array_equal(res.found, [int(q) in expect for q in query])
    for j, qid in enumerate(query.tolist()):
        want = rows["logits"][expect[qid]] if qid in expect else np.zeros(3, np.float32)
        np.testing.assert_array_equal(res.logits[j], want)

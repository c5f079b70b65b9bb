"""The documented own-loop example (docs/examples/own_loop, docs/guides/own_loop.md): a user's
Lightning module distils from a teacher store and LoopFM codes through gemkd's public names,
without ``gemkd run``; the data module joins every batch to the store and the codes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gemkd
from gemkd.experiments.run.runner import run_experiment
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.transfer.store import TeacherStore

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guides" / "own_loop.md"
SPEC = {
    "name": "own-loop", "seeds": [0],
    "data": {"source": "synthetic", "preset": "tiny",
             "overrides": {"examples_per_day": 1500, "n_users": 300, "history_days": 5}},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 16, "max_steps": 60}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [8]}},
    "student_tasks": ["click"], "tuning": {"trials": 1}, "keep_students": "none",
    "variants": ["kd_repr"],
    "repr": {"layer": "trunk", "code_dim": 4, "bits": 8, "max_events": 20, "epochs": 2},
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny world, its teacher's store and LoopFM codes (a run's cached steps)."""
    out = tmp_path_factory.mktemp("own-loop") / "run"
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_experiment(spec_from_mapping(SPEC), out)
    finally:
        torch.set_num_threads(n)
    (data,) = out.glob("cache/data-*/data")
    (store,) = out.glob("cache/store-*/store")
    (codes,) = out.glob("cache/codes-*/codes")
    return data, store, codes


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples" / "own_loop"))
    sys.modules.pop("distill_own_loop", None)
    import distill_own_loop

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield distill_own_loop
    torch.set_num_threads(before)


def test_the_data_module_joins_store_and_codes(inputs):
    data, store, codes = inputs
    dm = gemkd.DistillDataModule(data, store, ["click"], train_days=(3, 5), codes=codes,
                                 max_events=20, batch_size=300)
    rows = found = 0
    for tb in dm.train_dataloader():
        assert isinstance(tb, gemkd.TeacherBatch)
        b = len(tb)
        assert tb.teacher.logits.shape == (b, 1) and tb.codes.shape == (b, dm.code_dim)
        trained = TeacherStore(store).manifest.trained_until_day
        assert torch.equal(tb.staleness, (tb.batch.day - trained).float())
        # the joined logits are the store's own rows for these ids
        ids = tb.batch.example_id.numpy()
        table = TeacherStore(store).read(columns=["example_id", "logit_click"]).to_pandas()
        expect = table.set_index("example_id").loc[ids[tb.teacher.found.numpy()]]
        np.testing.assert_array_equal(tb.teacher.logits[tb.teacher.found, 0].numpy(),
                                      expect["logit_click"].to_numpy(np.float32))
        rows += b
        found += int(tb.teacher.found.sum())
        break
    assert rows and found == rows  # the store covers the student's days
    assert dm.code_dim == 4


def test_the_example_distils_in_its_own_loop(inputs, example):
    data, store, codes = inputs
    res = example.main(str(data), str(store), (3, 5), (5, 6), codes=str(codes), alpha=0.5)
    kd = res["kd_terms"]
    assert len(kd) >= 10 and all(np.isfinite(kd)) and min(kd) > 0  # the KD term is used
    assert res["ne_after"]["click"] < res["ne_before"]["click"]  # NE below the start
    # the KD term changes the student: labels alone (alpha 0) train another one
    alone = example.main(str(data), str(store), (3, 5), (5, 6), codes=str(codes), alpha=0.0)
    assert res["ne_after"]["click"] != alone["ne_after"]["click"]
    w, w0 = (r["model"].student.head.weight for r in (res, alone))
    assert not torch.equal(w, w0)


def test_the_guide_names_the_example_and_the_public_pieces():
    text = GUIDE.read_text()
    for name in ("DistillDataModule", "TeacherBatch", "kd_bce", "StudentAdapter",
                 "distill_own_loop.py"):
        assert name in text
    for name in ("DistillDataModule", "TeacherBatch", "kd_bce", "StudentAdapter", "AsOfCodes"):
        assert name in gemkd.__all__

"""``gemkd teacher export``: a fitted teacher's outputs land in a complete, verifiable store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.teacher_checkpoint import model_weights
from gemkd.experiments.teacher_config import build_model, load_teacher_config
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.store import TeacherJoin, TeacherStore, weights_hash

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fitted(tiny_data, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("fit")
    values = yaml.safe_load((ROOT / "experiments/teachers/tiny.yaml").read_text())
    values.update(max_seq_len=32, max_steps=15, val_days=None, test_days=None)
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump(values))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "gemkd.experiments.cli", "teacher", "fit", "--config", str(config),
         "--data", str(tiny_data), "--out", str(tmp / "run"), "--no-progress"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "run"


def _export(ckpt: Path, data: Path, out: Path, *extra: str) -> int:
    return main(["teacher", "export", "--ckpt", str(ckpt), "--data", str(data), "--out",
                 str(out), "--no-progress", *extra])


def test_export_matches_the_model(fitted, tiny_data, tmp_path, capsys):
    ckpt = fitted / "checkpoints" / "last.ckpt"
    out = tmp_path / "store"
    assert _export(ckpt, tiny_data, out, "--days", "4:6", "--layer", "wukong.0") == 0
    assert "exported 8000 rows" in capsys.readouterr().out
    store = TeacherStore(out)
    cfg = load_teacher_config(fitted / "config.yaml")
    m = store.manifest
    assert m.trained_until_day == cfg.train_days[1] - 1 and m.layer == "wukong.0"
    assert m.tasks == ["click", "conversion", "engage"] and m.emb_dtype == "float16"
    weights = model_weights(ckpt)
    assert m.teacher_version == weights_hash(weights)
    table = store.read()
    reader = DatasetReader(tiny_data, days=(4, 6), batch_size=4000, max_seq_len=cfg.max_seq_len)
    batches = list(reader)
    ids = torch.cat([b.example_id for b in batches]).numpy()
    assert np.array_equal(np.sort(table["example_id"].to_numpy()), np.sort(ids))

    model = build_model(cfg, DatasetSchema.load(tiny_data))
    model.load_state_dict(weights)
    model.eval()
    join = TeacherJoin(store, with_emb=True)
    with torch.no_grad():
        for b in batches:
            out_ = model(b)
            got = join(b)
            assert np.asarray(got.found).all()
            np.testing.assert_allclose(got.logits, out_.logits.numpy(), atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(got.emb, out_.repr["wukong.0"].numpy(), atol=2e-3,
                                       rtol=1e-3)


def test_int8_export(fitted, tiny_data, tmp_path):
    out = tmp_path / "store8"
    assert _export(fitted / "checkpoints" / "last.ckpt", tiny_data, out, "--days", "5:6",
                   "--emb-dtype", "int8") == 0
    store = TeacherStore(out)
    assert store.manifest.emb_dtype == "int8" and store.num_rows == 4000


@pytest.mark.parametrize("args, message", [
    (["--days", "6:2"], "--days '6:2': expected A:B"),
    (["--layer", "nope"], "--layer 'nope': the model's layers are"),
])
def test_bad_arguments_leave_no_store(fitted, tiny_data, tmp_path, capsys, args, message):
    out = tmp_path / "bad"
    assert _export(fitted / "checkpoints" / "last.ckpt", tiny_data, out, *args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_missing_or_foreign_checkpoint(fitted, tiny_data, tmp_path, capsys):
    out = tmp_path / "bad"
    assert _export(fitted / "checkpoints" / "nope.ckpt", tiny_data, out) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    junk = fitted / "checkpoints" / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    try:
        assert _export(junk, tiny_data, out) == 2
        assert "unreadable checkpoint" in capsys.readouterr().err
    finally:
        junk.unlink()
    assert not out.exists()

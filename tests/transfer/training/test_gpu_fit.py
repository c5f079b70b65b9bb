"""``gemkd teacher fit`` and ``export`` on CUDA (``make test-gpu``): FSDP2 with bf16 mixed
precision trains (loss falls), and the export of its checkpoint is a complete, finite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from gemkd.transfer.data.dataset_writer import day_path
from gemkd.transfer.store import TeacherStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
ROOT = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "gemkd.experiments.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.parametrize("strategy", ["fsdp", "auto"])
def test_fit_and_export_on_cuda(tiny_data, tmp_path, strategy):
    config = tmp_path / "tiny.yaml"
    values = yaml.safe_load((ROOT / "experiments/teacher/configs/tiny.yaml").read_text())
    values.update(accelerator="gpu", precision="bf16-mixed", max_steps=150,
                  log_every_n_steps=10, lr=0.01, max_seq_len=256)
    config.write_text(yaml.safe_dump(values))
    out = tmp_path / "run"
    _cli("teacher", "fit", "--config", str(config), "--data", str(tiny_data), "--out", str(out),
         "--strategy", strategy, "--no-progress")
    logs = pd.concat(pd.read_csv(f) for f in out.rglob("metrics.csv"))
    loss = logs["train/loss"].dropna().to_numpy()
    assert len(loss) >= 10 and np.isfinite(loss).all()
    assert loss[-5:].mean() < loss[:5].mean(), loss
    assert json.loads((out / "val_metrics.json").read_text())["global_step"] == 150

    ckpt = out / "checkpoints" / "last.ckpt"
    store = tmp_path / "store"
    _cli("teacher", "export", "--ckpt", str(ckpt), "--data", str(tiny_data), "--out",
         str(store), "--days", "0:2")
    want = sum(pq.read_metadata(day_path(tiny_data, d)).num_rows for d in (0, 1))
    s = TeacherStore(store)
    table = s.read(None, ["example_id", *s.logit_columns])
    assert s.num_rows == table.num_rows == want
    assert np.isfinite(s.logits(table)).all()

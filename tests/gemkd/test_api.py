"""The Python API under the commands (``import gemkd``): every name resolves, and the library
functions a notebook calls do what their commands do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

import gemkd
from tests.conftest import tiny_config

ROOT = Path(__file__).resolve().parents[2]


def test_every_api_name_resolves_and_import_is_cheap():
    for name in gemkd.__all__:
        assert getattr(gemkd, name) is not None, name
    code = "import sys, gemkd; print('torch' in sys.modules, gemkd.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    assert out[0] == "False" and out[1]


def test_data_teacher_store_through_the_api(tmp_path):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        schema = gemkd.generate(tiny_config(n_days=3, examples_per_day=600, n_users=200),
                                tmp_path / "data")
        cfg = gemkd.load_teacher_config(ROOT / "experiments/teacher/configs/tiny.yaml",
                                        {"train_days": [0, 2], "val_days": [2, 3],
                                         "max_steps": 5})
        summary = gemkd.fit_teacher(cfg, tmp_path / "data", tmp_path / "run", progress=False)
        assert summary["global_step"] == 5 and "ne/click/all" in summary["val"]
        manifest = gemkd.export_teacher(tmp_path / "run/checkpoints/last.ckpt",
                                        tmp_path / "data", tmp_path / "store", progress=False)
    finally:
        torch.set_num_threads(n)
    assert manifest.total_rows == schema.n_rows
    assert gemkd.TeacherStore(tmp_path / "store").tasks == schema.tasks

"""FSDP2 on CPU: 2 gloo processes under ModelParallelStrategy(data_parallel_size=2).

The job runs as a subprocess script (Lightning's own launcher re-runs it for rank 1), so pytest
never forks. Each rank writes what it saw to ``probe_rank{r}.json``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.store import TeacherStore

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "experiments/teacher/configs/tiny.yaml"

JOB = '''
import json, sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.distributed.tensor import DTensor

from gemkd.experiments.teacher.teacher_config import build_run, load_teacher_config
from gemkd.transfer.training import build_trainer, fit, release_process_group

config, data, out, max_steps, resume = sys.argv[1:6]


class Probe(pl.Callback):
    def __init__(self):
        self.losses, self.tables, self.start_step = [], {}, None

    def on_train_start(self, trainer, module):
        self.start_step = trainer.global_step
        for name, m in module.model.named_modules():
            if isinstance(m, torch.nn.Embedding):
                w = m.weight
                is_dt = isinstance(w, DTensor)
                self.tables[name] = {
                    "dtensor": is_dt, "rows": m.num_embeddings,
                    "global_rows": int(w.shape[0]),
                    "local_rows": int(w.to_local().shape[0]) if is_dt else int(w.shape[0]),
                    "placements": str(w.placements) if is_dt else None,
                }

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer, module):
        Path(out, f"probe_rank{trainer.global_rank}.json").write_text(json.dumps({
            "tables": self.tables, "losses": self.losses, "start_step": self.start_step,
            "global_step": trainer.global_step, "world_size": trainer.world_size,
            "strategy": type(trainer.strategy).__name__,
        }))


def train():
    cfg = load_teacher_config(config, {"max_steps": int(max_steps)})
    dm, module = build_run(cfg, data)
    trainer = build_trainer(out, strategy="fsdp", devices=2, max_steps=cfg.max_steps,
                            checkpoint_every_n_steps=10, progress_bar=False,
                            log_every_n_steps=5, callbacks=[Probe()], enable_model_summary=False)
    fit(module, dm, trainer, resume=resume == "1")


train()  # its trainer and module (whose FSDP state holds process groups) are gone after it
release_process_group()  # as the CLI does: no gloo threads left at exit
'''


def _run(job: Path, config: Path, data: Path, out: Path, max_steps: int, resume: bool):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(job), str(config), str(data), str(out), str(max_steps),
         "1" if resume else "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"probe_rank{r}.json").read_text()) for r in (0, 1)]


def _setup(tmp_path: Path, **overrides) -> tuple[Path, Path]:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    config = tmp_path / "tiny.yaml"
    values = yaml.safe_load(TINY.read_text())
    values.update(max_seq_len=32, val_days=None, test_days=None, lr=0.01, embedding_lr=0.05,
                  init_output_bias=False)  # from a random start the loss must fall
    values.update(overrides)
    config.write_text(yaml.safe_dump(values))
    return job, config


@pytest.mark.slow  # ~1-2 min on 2 cores: make test-slow
def test_fsdp_cpu_shards_trains_and_resumes(tiny_data, tmp_path):
    job, config = _setup(tmp_path)
    out = tmp_path / "run"

    probes = _run(job, config, tiny_data, out, max_steps=20, resume=False)
    for rank, p in enumerate(probes):
        assert p["strategy"] == "ModelParallelStrategy" and p["world_size"] == 2
        assert p["start_step"] == 0 and p["global_step"] == 20
        assert p["tables"], "no embedding tables found"
        for name, t in p["tables"].items():
            assert t["dtensor"], f"rank {rank}: {name} is not a DTensor"
            assert "Shard(dim=0)" in t["placements"], t
            assert t["global_rows"] == t["rows"]
            assert abs(t["local_rows"] - t["rows"] / 2) <= 1, (rank, name, t)
        losses = p["losses"]
        assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    for name in probes[0]["tables"]:  # the two shards cover the table exactly
        rows = [p["tables"][name]["local_rows"] for p in probes]
        assert sum(rows) == probes[0]["tables"][name]["rows"]
    ckpt = out / "checkpoints" / "last.ckpt"
    assert ckpt.is_dir() and any(ckpt.glob("*.distcp")), sorted(out.rglob("*"))
    first_losses = probes[0]["losses"]

    probes = _run(job, config, tiny_data, out, max_steps=30, resume=True)
    for p in probes:
        assert p["start_step"] == 20 and p["global_step"] == 30
    # restored weights: the resumed run starts near where the first one ended
    assert probes[0]["losses"][0] < sum(first_losses[:3]) / 3

    # the sharded checkpoint exports like a single-file one
    store = tmp_path / "store"
    assert main(["teacher", "export", "--ckpt", str(ckpt), "--config", str(config), "--data",
                 str(tiny_data), "--out", str(store), "--days", "5:6", "--no-progress"]) == 0
    assert TeacherStore(store).num_rows == 4000


@pytest.mark.slow  # ~1-2 min on 2 cores: make test-slow
def test_hsdp_mesh_replicates_across_groups(tiny_data, tmp_path):
    """fsdp_replicate=2 on 2 ranks: a (replicate=2, shard=1) mesh, every table replicated."""
    job, config = _setup(tmp_path, fsdp_replicate=2)
    out = tmp_path / "run"
    probes = _run(job, config, tiny_data, out, max_steps=8, resume=False)
    for p in probes:
        assert p["global_step"] == 8
        for t in p["tables"].values():
            assert t["dtensor"] and t["local_rows"] == t["rows"], t
            assert "Replicate()" in t["placements"] and "Shard(dim=0)" in t["placements"], t
        assert len(p["losses"]) == 8 and all(math.isfinite(v) for v in p["losses"])


class _FakeMesh:
    def __init__(self, names):
        self.mesh_dim_names, self.ndim = names, len(names)

    def __getitem__(self, key):
        return ("sub", key)


def test_fsdp_mesh_picks_dimensions():
    from gemkd.transfer.training import fsdp_mesh

    assert fsdp_mesh(_FakeMesh(("data_parallel", "tensor_parallel"))) == ("sub", "data_parallel")
    assert fsdp_mesh(_FakeMesh(("replicate", "shard"))) == ("sub", ("replicate", "shard"))
    assert fsdp_mesh(_FakeMesh(("dp_replicate", "dp_shard", "tp"))) == (
        "sub", ("dp_replicate", "dp_shard"))

"""``teacher fit --strategy fsdp`` across 2 nodes × 1 process, launched the way a cluster does:
two ``torchrun --nnodes 2 --node-rank {0,1}`` on this machine (gloo, 127.0.0.1). Lightning's
TorchElastic environment reads torchrun's variables; nothing of gemkd's own. The sharded
checkpoint resumes on the same 2 nodes and exports, with one process and across the 2 nodes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gemkd.transfer.store import TeacherStore

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "experiments/teacher/configs/tiny.yaml"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_2_nodes(tmp_path: Path, *argv: str) -> list[str]:
    """``gemkd argv`` as node 0 and node 1 of a 2-node torchrun job; returns their stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    port = _port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
         "1", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port",
         str(port), "-m", "gemkd.experiments.cli", *argv, "--num-nodes", "2", "--devices", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
        outs.append(out)
    return outs


@pytest.mark.slow
def test_fsdp_two_nodes_trains_resumes_and_exports(tiny_data, tmp_path):
    values = yaml.safe_load(TINY.read_text())
    values.update(max_seq_len=32, val_days=None, test_days=None, max_steps=20,
                  checkpoint_every_n_steps=10)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(values))
    run = tmp_path / "run"
    fit = ["teacher", "fit", "--config", str(config), "--data", str(tiny_data), "--out",
           str(run), "--strategy", "fsdp"]
    outs = torchrun_2_nodes(tmp_path, *fit)
    assert outs[0].startswith("trained gem-tiny to step 20;") and outs[1] == ""  # rank 0 prints
    ckpt = run / "checkpoints" / "last.ckpt"
    assert ckpt.is_dir() and sorted(p.name for p in ckpt.glob("*.distcp")) == [
        "__0_0.distcp", "__1_0.distcp"]  # one shard per node

    config.write_text(yaml.safe_dump({**values, "max_steps": 30}))
    outs = torchrun_2_nodes(tmp_path, *fit, "--resume")
    summary = json.loads((run / "val_metrics.json").read_text())
    assert summary["global_step"] == 30 and summary["resumed_from"] == str(ckpt)
    assert summary["examples_per_s"] > 0

    store = tmp_path / "store"
    torchrun_2_nodes(tmp_path, "teacher", "export", "--ckpt", str(ckpt), "--data",
                     str(tiny_data), "--out", str(store), "--days", "4:6")
    assert TeacherStore(store).num_rows == 8000  # both nodes' rows, each once
    assert TeacherStore(store).manifest.extra["world_size"] == 2

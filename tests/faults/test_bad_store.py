"""A damaged cached store (or data) under a finished run, found by a rerun of ``gemkd run``: one
``error:`` line naming the file, column or teacher, exit code 2, and no result or step changed.

The store's own refusals are unit-tested in tests/transfer/store/test_store.py; this is the path a
user meets them on, and the check that a cached store belongs to the run's teacher at all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gemkd.experiments.cli import main
from gemkd.transfer.io.integrity import sha256_file as _sha256
from gemkd.transfer.store.store_writer import parquet_options
from tests.faults.conftest import TinyRun, cli_error, snapshot


@pytest.fixture
def run(tiny_run: TinyRun, tmp_path: Path) -> TinyRun:
    """A private copy of the reference run, safe to damage."""
    out = tmp_path / "run"
    shutil.copytree(tiny_run.out, out)
    return TinyRun(tiny_run.spec, out)


def flip_byte(run: TinyRun) -> str:
    (shard,) = run.store.glob("*.parquet")
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    return f"{shard}: sha256 differs from manifest.json (file changed or corrupted after export)"


def nan_logit(run: TinyRun, row: int = 1234) -> str:
    """A NaN logit in an otherwise intact store: the shard and its manifest sha256 agree."""
    (shard,) = run.store.glob("*.parquet")
    table = pq.read_table(shard)
    logits = table["logit_click"].to_numpy().copy()
    logits[row] = np.nan
    i = table.schema.get_field_index("logit_click")
    pq.write_table(table.set_column(i, "logit_click", pa.array(logits)), shard,
                   **parquet_options("float16"))
    path = run.store / "manifest.json"
    m = json.loads(path.read_text())
    m["shards"][0]["sha256"] = _sha256(shard)
    path.write_text(json.dumps(m))
    return f"{shard}: column 'logit_click' row {row} is not finite (NaN/inf)"


def other_teacher(run: TinyRun) -> str:
    """Swap in a complete, valid store exported from other weights (one parameter nudged)."""
    ckpt = torch.load(run.ckpt, map_location="cpu", weights_only=False)
    name = next(k for k, v in ckpt["state_dict"].items()
                if k.startswith("model.") and v.is_floating_point())
    ckpt["state_dict"][name] += 0.01
    other = run.out.parent / "other.ckpt"
    torch.save(ckpt, other)
    exported = run.out.parent / "other-store"
    assert main(["teacher", "export", "--ckpt", str(other), "--config",
                 str(run.ckpt.parents[1] / "config.yaml"), "--data", str(run.data), "--out",
                 str(exported), "--no-progress"]) == 0
    other_version = json.loads((exported / "manifest.json").read_text())["teacher_version"]
    version = json.loads((run.store / "manifest.json").read_text())["teacher_version"]
    assert other_version != version
    shutil.rmtree(run.store)
    shutil.copytree(exported, run.store)
    return (f"{run.store}: exported from teacher 'gem-tiny' version {other_version[:12]}, but "
            f"the teacher checkpoint {run.ckpt} has weights {version[:12]}; re-export")


def truncated_data(run: TinyRun) -> str:
    path = run.data / "day=5" / "part-0.parquet"
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    return f"{path}: sha256 "  # the run checks its days' part digests before it reads them


@pytest.mark.parametrize("damage", [flip_byte, nan_logit, other_teacher, truncated_data],
                         ids=["shard-sha256", "nan-logit", "other-teacher", "truncated-data"])
def test_rerun_refuses_damaged_cache(run, capsys, damage):
    message = damage(run)
    before = snapshot(run.out)
    err = cli_error(capsys, "run", str(run.spec), "--out", str(run.out), "--threads", "1")
    assert err.startswith(f"error: {message}"), err
    assert snapshot(run.out) == before

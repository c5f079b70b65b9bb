"""Under DDP (2 gloo processes) every rank's compute() equals one process on all the data."""

from __future__ import annotations

import json
import math
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gemkd.transfer.metrics import Calibration, NormalizedEntropy, RankingMetrics, SafeBinaryAUROC

WORLD = 2
TASKS = ["ctr", "cvr"]
DOMAINS = ["feed", "story", "reels", "search"]  # "search" never occurs
N, SPLIT = 200, 130  # uneven halves: rank 0 rows [0, 130), rank 1 rows [130, 200)


def make_data():
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(N, 2, generator=g) * 2 - 1
    labels = (torch.rand(N, 2, generator=g) < torch.sigmoid(logits)).float()
    domain = torch.randint(0, 2, (N,), generator=g)
    domain[:40] = 2  # "reels" only ever reaches rank 0
    labels[domain == 1, 1] = 0.0  # cvr without positives in "story"
    mask = torch.rand(N, 2, generator=g) < 0.75
    return logits, labels, domain, mask


def run_metrics(rows: dict[str, range]) -> dict[str, float]:
    """Build, update (in chunks of 32 over the given rows) and compute every metric.

    ``rows["split"]`` feeds the metrics that are split between ranks, ``rows["idle"]`` the
    metrics whose second rank sees no batch at all (torchmetrics then gathers a stand-in).
    """
    logits, labels, domain, mask = make_data()
    split = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"ctr": 0.35})
    idle, idle_auc = RankingMetrics(TASKS, 4, DOMAINS), SafeBinaryAUROC()
    ne, ne_base, cal, auc = (
        NormalizedEntropy(),
        NormalizedEntropy(base_rate=0.35),
        Calibration(),
        SafeBinaryAUROC(),
    )
    for metric, idx in ((split, rows["split"]), (idle, rows["idle"])):
        for lo in range(idx.start, idx.stop, 32):
            sl = slice(lo, min(lo + 32, idx.stop))
            metric.update(logits[sl], labels[sl], domain[sl], mask[sl])
    for lo in range(rows["idle"].start, rows["idle"].stop, 32):
        sl = slice(lo, min(lo + 32, rows["idle"].stop))
        idle_auc.update(logits[sl, 1], labels[sl, 1])
    for lo in range(rows["split"].start, rows["split"].stop, 32):
        sl = slice(lo, min(lo + 32, rows["split"].stop))
        for m in (ne, ne_base, cal, auc):
            m.update(logits[sl, 0], labels[sl, 0])
    out = {f"split:{k}": v for k, v in split.compute().items()}
    out |= {f"idle:{k}": v for k, v in idle.compute().items()}
    named = {"ne": ne, "ne_base": ne_base, "cal": cal, "auc": auc, "idle:auc": idle_auc}
    for name, m in named.items():
        out[name] = m.compute().item()
    return out


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    try:
        if rank == 0:
            rows = {"split": range(0, SPLIT), "idle": range(0, N)}
        else:
            rows = {"split": range(SPLIT, N), "idle": range(0)}
        result = run_metrics(rows)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_ddp_compute_equals_single_process(tmp_path):
    os.environ.pop("MASTER_ADDR", None)
    mp.start_processes(
        _worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True, start_method="spawn"
    )
    expected = run_metrics({"split": range(0, N), "idle": range(0, N)})
    # the scenario really has the edge cases it claims
    assert expected["split:n/ctr/reels"] > 0 and expected["split:n/ctr/search"] == 0
    assert math.isnan(expected["split:auc/cvr/story"])
    assert math.isfinite(expected["split:auc/ctr/all"])
    for rank in range(WORLD):
        got = json.loads(Path(tmp_path, f"rank{rank}.json").read_text())
        assert set(got) == set(expected)
        bad = {
            k: (got[k], v)
            for k, v in expected.items()
            if not (
                (math.isnan(v) and math.isnan(got[k])) or abs(got[k] - v) <= 1e-6 * max(1.0, abs(v))
            )
        }
        assert not bad, f"rank {rank}: {bad}"

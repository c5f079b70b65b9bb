"""The timed units of bench_teacher: one GEM training step, a dense matmul of the same rounds
(the machine's own GFLOP/s), FLOP counts and batches read once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gemkd.teachers import GEM
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.training.flat_adamw import FlatAdamW
from gemkd.transfer.training.ranking_module import embedding_parameters
from gemkd.transfer.training.table_optim import ROW_RULES, id_tables, set_sparse_tables

BATCH = 512
MM_SHAPE = (512, 1024, 1024)  # [M, K] @ [K, N]: the B x mlp_width x mlp_width of `base`
DEVICE = "cpu"  # set by bench_teacher's main() from --device


class Step:
    """One training step of a fresh GEM (seeded) with the trainer's AdamW groups; a row-wise
    ``table_optimizer`` (``gemkd.transfer.training.table_optim``) moves the ID tables into a
    group of their own, updated row-wise over row-sparse gradients, as the trainer does."""

    def __init__(self, schema, config: dict, compile_: bool = False, seed: int = 0,
                 table_optimizer: str = "dense_adamw"):
        torch.manual_seed(seed)
        self.model = GEM.from_config(schema, config).to(DEVICE)
        self.model.train()
        row_wise = table_optimizer in ROW_RULES
        set_sparse_tables(self.model, row_wise)
        tables = [t.weight for t in id_tables(self.model)] if row_wise else []
        table_ids = {id(p) for p in tables}
        emb = [p for p in embedding_parameters(self.model) if id(p) not in table_ids]
        ids = {id(p) for p in emb} | table_ids
        dense = [p for p in self.model.parameters() if id(p) not in ids]
        groups: list[dict[str, Any]] = [{"params": emb, "lr": 0.01, "weight_decay": 0.0},
                                        {"params": dense}]
        if row_wise:
            groups.insert(0, {"params": tables, "lr": 0.01, "weight_decay": 0.0,
                              "table_rule": table_optimizer})
            self.opt: torch.optim.Optimizer = FlatAdamW(groups, lr=1e-3)
        else:
            self.opt = torch.optim.AdamW(groups, lr=1e-3)
        self.forward = torch.compile(self.model) if compile_ else self.model

    def loss(self, batch: Batch) -> torch.Tensor:
        logits = self.forward(batch).logits
        return F.binary_cross_entropy_with_logits(logits, batch.labels)

    def __call__(self, batch: Batch) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def cycler(step: Step, batches: list[Batch]) -> Callable[[], object]:
    state = {"i": 0}

    def run() -> object:
        b = batches[state["i"] % len(batches)]
        state["i"] += 1
        return step(b)

    return run


def matmul_fn() -> Callable[[], object]:
    m, k, n = MM_SHAPE
    a, b = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)

    def run() -> None:
        for _ in range(4):
            torch.mm(a, b)

    return run


MM_FLOPS = 4 * 2 * MM_SHAPE[0] * MM_SHAPE[1] * MM_SHAPE[2]  # four mms per call


def step_flops(step: Step, batch: Batch) -> int:
    """Matmul/attention FLOPs of one forward + backward (``FlopCounterMode``: it counts mm,
    bmm, addmm, convolutions and SDPA, not elementwise ops, embedding bags or the optimizer)."""
    step.opt.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        step.model(batch).logits.float().sum().backward()
    step.opt.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def read_batches(root: Path, n: int, max_seq_len: int | None = None) -> list[Batch]:
    reader = DatasetReader(root, batch_size=BATCH, max_seq_len=max_seq_len)
    out = []
    for b in reader:
        if len(b) == BATCH:
            out.append(b.to(DEVICE))
        if len(out) == n:
            break
    return out

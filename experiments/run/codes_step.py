"""The LoopFM codes step of a run: a compressor fitted on the teacher's embeddings, every stored
row's code quantised into a code store (cached)."""

from __future__ import annotations

from pathlib import Path

import torch

from gemkd.experiments.run.cache import cached_step
from gemkd.transfer.data.schema import day_range
from gemkd.transfer.io import fs


def build_codes(store: fs.Where, window: tuple[int, int], repr_cfg, seed: int, cache: Path,
                log) -> Path:
    """LoopFM codes: a compressor fitted on the teacher's embeddings of its own window's days
    encodes every stored row; codes are quantised into a code store."""
    from gemkd.adapters.compressor import fit_compressor
    from gemkd.transfer.repr_features import quantize_codes, write_code_store
    from gemkd.transfer.store import TeacherStore

    code_dim, bits, epochs = repr_cfg.code_dim, repr_cfg.bits, repr_cfg.epochs
    key = {"store": fs.name(fs.parent(store)), "window": list(window), "code_dim": code_dim,
           "bits": bits, "epochs": epochs, "seed": seed}

    def run(step: Path) -> None:
        ts = TeacherStore(store)
        fit_table = ts.read(days=day_range(window))
        model, info = fit_compressor(ts.embeddings(fit_table), code_dim=code_dim,
                                     epochs=epochs, seed=seed)
        log(f"  compressor R² by prefix: "
            f"{ {p: round(r, 3) for p, r in info['r2'].items()} }")
        table = ts.read()
        with torch.no_grad():
            codes = model.encode(torch.from_numpy(ts.embeddings(table))).numpy()
        write_code_store(step / "codes", table["example_id"].to_numpy(),
                         table["user_id"].to_numpy(), table["ts"].to_numpy(),
                         table["day"].to_numpy(), quantize_codes(codes, bits), bits, code_dim,
                         {"teacher_version": ts.manifest.teacher_version,
                          "r2": {str(k): float(v) for k, v in info["r2"].items()}},
                         overwrite=True)

    return cached_step(cache, "codes", key, run, log) / "codes"

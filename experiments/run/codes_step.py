"""The LoopFM codes step of a run: a compressor fitted on the teacher's embeddings, every stored
row's code quantised into a code store (cached).

Bounded memory: the compressor fits on at most ``FIT_ROWS`` (262,144) embeddings of its window
(all of them, as before, when the window is smaller: every shipped spec), and rows are encoded
one store row group at a time; what stays is each row's keys and code (~36 B a row at
``code_dim`` 8, which the code store's one sorted file and the students' as-of index need), never
the float embeddings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gemkd.experiments.run.cache import cached_step
from gemkd.transfer.data.schema import day_range
from gemkd.transfer.io import fs

#: the most embeddings the compressor fits on (a uniform, seeded sample above it): 256 MB of
#: float32 at width 256, plenty for an 8-wide code's small MLP; every shipped spec's window is
#: smaller (quickstart 180k rows, benchmark 120k), so its codes are unchanged
FIT_ROWS = 1 << 18
_KEYS = ("example_id", "user_id", "ts", "day")


def build_codes(store: fs.Where, window: tuple[int, int], repr_cfg, seed: int, cache: Path,
                log) -> Path:
    """LoopFM codes: a compressor fitted on the teacher's embeddings of its own window's days
    encodes every stored row; codes are quantised into a code store."""
    from gemkd.adapters.compressor import fit_compressor
    from gemkd.transfer.repr_features import code_nbytes, quantize_codes, write_code_store
    from gemkd.transfer.store import TeacherStore
    from gemkd.transfer.store.sample import sample_embeddings

    code_dim, bits, epochs = repr_cfg.code_dim, repr_cfg.bits, repr_cfg.epochs
    key = {"store": fs.name(fs.parent(store)), "window": list(window), "code_dim": code_dim,
           "bits": bits, "epochs": epochs, "seed": seed, "fit_rows": FIT_ROWS}

    def run(step: Path) -> None:
        ts = TeacherStore(store)
        emb = sample_embeddings(ts, day_range(window), FIT_ROWS, seed)
        model, info = fit_compressor(emb, code_dim=code_dim, epochs=epochs, seed=seed)
        del emb
        log(f"  compressor R² by prefix: "
            f"{ {p: round(r, 3) for p, r in info['r2'].items()} }")
        keys: dict[str, list[np.ndarray]] = {k: [] for k in _KEYS}
        codes_q: list[np.ndarray] = []
        with torch.no_grad():
            for table in ts.iter_row_groups(None, [*_KEYS, *ts.emb_columns]):
                for k in _KEYS:
                    keys[k].append(table.column(k).to_numpy())
                codes = model.encode(torch.from_numpy(ts.embeddings(table))).numpy()
                codes_q.append(quantize_codes(codes, bits))
        cat = {k: _cat(v, np.int32 if k == "day" else np.int64) for k, v in keys.items()}
        q = (np.concatenate(codes_q) if codes_q
             else np.zeros((0, code_nbytes(bits, code_dim)), np.int8))
        write_code_store(step / "codes", cat["example_id"], cat["user_id"], cat["ts"],
                         cat["day"], q, bits, code_dim,
                         {"teacher_version": ts.manifest.teacher_version,
                          "r2": {str(k): float(v) for k, v in info["r2"].items()}},
                         overwrite=True)

    return cached_step(cache, "codes", key, run, log) / "codes"


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)

"""The LoopFM codes step of a run: a compressor fitted on the teacher's embeddings, every stored
row's code quantised into a code store (cached).

Bounded memory: the compressor fits on at most ``FIT_ROWS`` (262,144) embeddings of its window
(all of them, as before, when the window is smaller: every shipped spec), and rows are encoded
one store row group at a time and spilled to disk; the code store's one file, sorted by
(user, ts, example_id), is written from the spill by an external sort
(``transfer/repr_features/code_sort.py``): memory is one store row group and one sort bucket,
whatever the store's length.
"""

from __future__ import annotations

from pathlib import Path

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
    from gemkd.transfer.repr_features import quantize_codes
    from gemkd.transfer.repr_features.code_sort import write_code_store_streamed
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

        def chunks():
            for table in ts.iter_row_groups(None, [*_KEYS, *ts.emb_columns]):
                with torch.no_grad():
                    codes = model.encode(torch.from_numpy(ts.embeddings(table))).numpy()
                yield (*(table.column(k).to_numpy() for k in _KEYS), quantize_codes(codes, bits))

        write_code_store_streamed(step / "codes", chunks(), bits, code_dim,
                                  {"teacher_version": ts.manifest.teacher_version,
                                   "r2": {str(k): float(v) for k, v in info["r2"].items()}},
                                  overwrite=True)

    return cached_step(cache, "codes", key, run, log) / "codes"


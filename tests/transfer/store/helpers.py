"""Rows, writers and stores the store tests share."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gemkd.transfer.store import Manifest, StoreWriter, TeacherStore

TASKS = ["click", "conversion", "organic"]
E = 8


def make_rows(n: int, seed: int = 0, days: tuple[int, ...] = (3, 4, 5), first_id: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.int64) * 7 + first_id  # sparse, shuffled ids
    return {
        "example_id": ids,
        "day": rng.choice(np.array(days), n).astype(np.int64),
        "domain": rng.integers(0, 3, n),
        "user_id": rng.integers(0, 1000, n),
        "ts": rng.integers(1_700_000_000, 1_700_900_000, n),
        "logits": rng.normal(0, 3, (n, len(TASKS))).astype(np.float32),
        "emb": (rng.normal(0, 1, (n, E)) * rng.uniform(0.01, 10, (n, 1))).astype(np.float32),
    }


def writer_args(**kw) -> dict:
    args = dict(tasks=TASKS, layer="trunk", emb_dim=E, emb_dtype="float16", teacher_name="gem",
                teacher_version="a" * 64, trained_until_day=9, rows_per_shard=40,
                row_group_rows=16)
    args.update(kw)
    return args


def feed(w: StoreWriter, rows: dict, batch: int = 13) -> None:
    n = len(rows["example_id"])
    for lo in range(0, n, batch):
        w.write(**{k: v[lo:lo + batch] for k, v in rows.items()})


def write_store(path: Path, rows: dict, **kw) -> Manifest:
    w = StoreWriter(path, **writer_args(**kw))
    feed(w, rows)
    return w.finalize()


def sorted_by_id(store: TeacherStore, table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = table.column("example_id").to_numpy()
    o = np.argsort(ids)
    return ids[o], store.logits(table)[o], store.embeddings(table)[o]


def no_leftovers(target: Path) -> None:
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}")] == []

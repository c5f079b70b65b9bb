"""``precompute_pairs``: SOLARIS's asynchronous step as a library function. For each day d the
speculation policy picks pairs from the log before d; the teacher of that day (a checkpoint per
day, chosen by the caller) runs forward on a synthetic row per pair (the user's latest row before
d with the item's side from the item's latest row, :mod:`gemkd.transfer.solaris.rows`) and its
``layer`` representation — the layer the store exports — goes into a pair store. The hit rate and
wasted share of every day and K are measured on the way (``measurements.json`` beside it)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from gemkd.transfer.data.dataset_writer import read_day, write_day
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io.atomic import atomic_write_bytes
from gemkd.transfer.solaris import (
    PastLog,
    SpeculationPolicy,
    check_picks,
    day_measures,
    read_log,
    write_pair_store,
)
from gemkd.transfer.solaris.rows import LatestRows, item_columns, pair_rows

MEASUREMENTS = "measurements.json"


def k_grid(k: int) -> list[int]:
    """The K at which the hit rate is measured: powers of two below ``k``, and ``k``."""
    return sorted({2 ** j for j in range(k.bit_length()) if 2 ** j < k} | {k})


def teacher_vectors(model: torch.nn.Module, rows, schema: DatasetSchema, day: int, layer: str,
                    max_seq_len: int | None, batch_size: int) -> np.ndarray:
    """``model``'s ``layer`` representation of every row of ``rows`` (in order), read back
    through the dataset reader (a one-day dataset in a temporary folder), so the teacher sees
    exactly the batches the store's export would build."""
    from gemkd.transfer.data.dataset_reader import DatasetReader

    eid = rows.column("example_id").to_numpy()
    with tempfile.TemporaryDirectory() as tmp:
        write_day(rows.cast(schema.arrow_schema()), Path(tmp), day)
        dataclasses.replace(schema, days=[day], rows_per_day={str(day): rows.num_rows}
                            ).save(tmp)
        out: np.ndarray | None = None
        reader = DatasetReader(tmp, days=(day, day + 1), batch_size=batch_size,
                               max_seq_len=max_seq_len)
        with torch.no_grad():
            for batch in reader:
                rep = model(batch).repr[layer].float().cpu().numpy()
                if out is None:
                    out = np.zeros((len(eid), rep.shape[1]), dtype=np.float32)
                out[np.searchsorted(eid, batch.example_id.numpy())] = rep
    assert out is not None or not len(eid)
    return out if out is not None else np.zeros((0, 1), dtype=np.float32)


def precompute_pairs(data: str | Path, days: Sequence[int], checkpoints: dict[int, Path],
                     policy: SpeculationPolicy, k: int, layer: str, out: Path, *,
                     item: str, served_domain: str | None = None, batch_size: int = 4096,
                     log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Write the pair store of ``days`` to ``out`` and ``measurements.json`` beside it; returns
    the measurements. ``checkpoints[d]``: the teacher that precomputes day d (trained on days
    before d only); ``served_domain``: the hit rate counts that domain's rows (None: all)."""
    from gemkd.experiments.teacher.teacher_config import load_teacher

    schema = DatasetSchema.load(data)
    days = list(days)
    first = min(schema.days)
    keys = read_log(data, range(first, days[-1] + 1), item)
    if served_domain is not None:
        schema.check_domain("student_domain", served_domain, data)
    latest, columns, ks = LatestRows(item), None, k_grid(k)
    loaded: dict[Path, Any] = {}
    parts: list[pd.DataFrame] = []
    vectors: list[np.ndarray] = []
    records: list[dict[str, Any]] = []
    next_day = first
    for d in days:
        while next_day < d:  # the rows as of the end of d - 1, a day at a time
            table = read_day(data, next_day)
            latest.add_day(next_day, table)
            if columns is None and next_day == d - 1:
                columns = item_columns(schema, table, item)
            next_day += 1
        if columns is None:
            raise ConfigError(f"solaris: day {d} has no day before it in {data} to speculate "
                              "from")
        ckpt = checkpoints[d]
        if ckpt not in loaded:
            loaded.clear()  # one teacher in memory at a time
            teacher = load_teacher(ckpt, data)
            model: Any = teacher.model  # a teacher (gemkd.transfer.models): duck-typed
            dims = model.representation_dims()
            if layer not in dims:
                raise ConfigError(f"solaris.layer {layer!r}: the teacher's layers are "
                                  f"{', '.join(dims)}")
            loaded[ckpt] = teacher
        teacher = loaded[ckpt]
        picks = check_picks(policy.pick(PastLog.before(keys, d), k), k,
                            f"speculation policy {type(policy).__name__} on day {d}")
        rows, ok = pair_rows(latest, picks["user_id"].to_numpy(), picks["item"].to_numpy(),
                             columns, d)
        kept = picks.iloc[ok].reset_index(drop=True)
        vectors.append(teacher_vectors(teacher.model.eval(), rows, schema, d, layer,
                                       teacher.cfg.max_seq_len, batch_size))
        parts.append(kept.assign(day=d))
        served = keys[keys["day"] == d]
        if served_domain is not None:
            served = served[served["domain"] == schema.domains.index(served_domain)]
        day_recs = [{"day": d, "checkpoint": ckpt.name, **m}
                    for m in day_measures(kept, served, ks)]
        records += day_recs
        top = day_recs[-1]
        log(f"  solaris day {d} ({ckpt.name}): {len(kept)} pairs "
            f"({len(picks) - len(kept)} without a row), hit rate {top['hit_rate']:.3f}, "
            f"wasted {top['wasted_share']:.3f} at K={k}")
    pairs = pd.concat(parts, ignore_index=True)
    dim = next((v.shape[1] for v in vectors if len(v)), 1)
    vecs = np.concatenate([v.reshape(len(v), dim) for v in vectors]) if vectors \
        else np.zeros((0, dim), np.float32)
    meta = {"layer": layer, "k": k, "item_feature": item, "policy": type(policy).__name__,
            "checkpoints": {str(d): str(c) for d, c in checkpoints.items()}}
    write_pair_store(out, pairs["day"].to_numpy(), pairs["user_id"].to_numpy(),
                     pairs["item"].to_numpy(), pairs["rank"].to_numpy(), vecs, meta,
                     overwrite=True)
    records = [{key: None if isinstance(v, float) and v != v else v for key, v in r.items()}
               for r in records]  # an empty day's NaN rate: null in JSON
    result = {"k": k, "ks": ks, "served_domain": served_domain, "pairs": len(pairs),
              "days": records}
    atomic_write_bytes(Path(out).parent / MEASUREMENTS,
                       (json.dumps(result, indent=2) + "\n").encode())
    return result

"""The shard format of a teacher-output store (DESIGN §4): its Arrow schema, Parquet options,
file names, and the value encodings (float16, per-row int8) its writers and readers share."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch

KEY_COLUMNS: dict[str, pa.DataType] = {
    "example_id": pa.int64(),
    "day": pa.int32(),
    "domain": pa.int16(),
    "user_id": pa.int64(),
    "ts": pa.int64(),
}
ROW_ARRAYS = ("example_id", "day", "domain", "user_id", "ts")
#: The tensors of one predicted batch a store is written from (``RankingModule.predict_step``
#: returns them, ``StoreCallback`` writes them): the key columns, ``logits [B, T]``, ``emb [B, E]``
PREDICTION_KEYS = (*ROW_ARRAYS, "logits", "emb")


def parquet_options(emb_dtype: str) -> dict[str, Any]:
    """Writer options for a shard.

    Dictionary-encoding or collecting statistics on float columns costs more than the write
    itself (every value is distinct), so only the small key columns that filters and pruning use
    get them. int8 codes are dictionary-encoded: Parquet has no 8-bit physical type, so plain
    encoding stores each code as a 4-byte INT32 (measured: 140 B/row for E=64 after snappy, more
    than float16's 128); with a <= 255-entry dictionary a code takes one byte (68 B/row).
    """
    dictionary = ["day", "domain"]
    if emb_dtype == "int8":
        dictionary.append("emb.list.element")
    return {"compression": "snappy", "use_dictionary": dictionary,
            "write_statistics": ["example_id", "day", "domain", "ts"]}


def shard_name(rank: int, k: int) -> str:
    return f"part-r{rank:03d}-{k:05d}.parquet"


def rank_marker(rank: int) -> str:
    return f"_rank-r{rank:03d}.json"


def logit_column(task: str) -> str:
    return f"logit_{task}"


def store_schema(tasks: list[str], emb_dim: int, emb_dtype: str) -> pa.Schema:
    """The Arrow schema of every shard (``emb_scale`` only for int8 embeddings)."""
    value = pa.float16() if emb_dtype == "float16" else pa.int8()
    fields = [pa.field(k, t) for k, t in KEY_COLUMNS.items()]
    fields += [pa.field(logit_column(t), pa.float32()) for t in tasks]
    fields.append(pa.field("emb", pa.list_(value, emb_dim)))
    if emb_dtype == "int8":
        fields.append(pa.field("emb_scale", pa.float32()))
    return pa.schema(fields)


def quantize_int8(emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``scale = max|x| / 127``, ``q = round(x / scale)``.

    Error per value is at most ``scale / 2``. Rows with ``max|x| < 1e-30`` (all-zero rows among
    them) get codes 0 — their error is below 1e-30, and ``127 / max|x|`` would overflow float32.
    numpy, not torch: as fast here, and it never contends for intra-op threads.
    """
    x = np.asarray(emb, dtype=np.float32)
    amax = np.maximum(x.max(axis=1), -x.min(axis=1))
    inv = np.divide(np.float32(127.0), amax, out=np.zeros_like(amax), where=amax >= 1e-30)
    y = x * inv[:, None]
    np.rint(y, out=y)  # |y| <= 127 by construction
    return y.astype(np.int8), amax / np.float32(127.0)


def to_float16(emb: np.ndarray) -> np.ndarray:
    """float32 → float16 (torch's vectorised cast; bit-identical to numpy's, several times
    faster on large arrays — call it on row groups, not on small batches)."""
    if emb.dtype == np.float16:
        return emb
    return torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32)).half().numpy()


def to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)

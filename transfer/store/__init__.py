"""The teacher-output store: Parquet shards + manifest, written by rank, read and joined by
example_id (DESIGN §4).

``StoreCallback`` loads Lightning, so it is imported on first use:
reading or joining a store does not pay for importing Lightning.
"""

from typing import Any

from gemkd.transfer.options import EMB_DTYPES
from gemkd.transfer.store.format import PREDICTION_KEYS
from gemkd.transfer.store.join import JoinResult, TeacherJoin
from gemkd.transfer.store.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Manifest,
    ShardInfo,
    weights_hash,
)
from gemkd.transfer.store.store_reader import TeacherStore, embeddings_of
from gemkd.transfer.store.store_writer import (
    StoreWriter,
    dedupe_shards,
    quantize_int8,
    store_schema,
)

__all__ = [
    "EMB_DTYPES",
    "MANIFEST_NAME",
    "PREDICTION_KEYS",
    "SCHEMA_VERSION",
    "JoinResult",
    "Manifest",
    "ShardInfo",
    "StoreCallback",
    "StoreWriter",
    "TeacherJoin",
    "TeacherStore",
    "dedupe_shards",
    "embeddings_of",
    "quantize_int8",
    "store_schema",
    "weights_hash",
]


def __getattr__(name: str) -> Any:
    if name == "StoreCallback":
        from gemkd.transfer.store import prediction_writer

        return getattr(prediction_writer, name)
    raise AttributeError(f"module 'gemkd.transfer.store' has no attribute {name!r}")

"""Turn predictions logged by a model outside gemkd into a verified teacher-output store
(``gemkd store import``, DESIGN §5.1): a production FM's scores become a teacher any experiment
can distil from, with the same integrity guarantees as an export (shards, sha256, manifest last).

The source is a Parquet file or directory with ``example_id``, one float logit column per task
(``logit_<task>`` unless mapped) and optionally an embedding column (a fixed-size or plain list
of floats). The key columns ``day, domain, user_id, ts`` come from the source when it has them,
else from the dataset (``data``) by example_id. Without an embedding the store holds a
1-wide zero representation under the layer name ``none`` (methods that need the teacher's
representation refuse such a store).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from gemkd.transfer.errors import DataError, StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.store.manifest import Manifest
from gemkd.transfer.store.store_writer import StoreWriter

#: The per-example columns a store keeps beside the logits: the source's own, or the
#: dataset's found by example_id
EXAMPLE_COLUMNS = ("day", "domain", "user_id", "ts")
NO_LAYER = "none"


def _open(src: Path) -> ds.Dataset:
    if not src.exists():
        raise DataError(f"{src}: no such file or directory")
    try:
        return ds.dataset(src, format="parquet")
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"{src}: not a readable Parquet file or directory "
                        f"({str(e).splitlines()[0]})") from None


def _source_hash(src: Path) -> str:
    files = sorted(p for p in ([src] if src.is_file() else src.rglob("*.parquet")))
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return "import-" + h.hexdigest()


def _float_column(table: pa.Table, name: str, src: Path) -> np.ndarray:
    col = table.column(name)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise DataError(f"{src}: column {name!r} is {col.type}, expected float logits")
    return col.to_numpy(zero_copy_only=False).astype(np.float32)


def _dataset_keys(data: str | Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """example_id (sorted) and the key columns of every row of a gemkd dataset."""
    from gemkd.transfer.data.dataset_writer import day_paths
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(data)
    filesystem, _ = fs.resolve(data)
    paths = [fs.resolve(p)[1] for d in schema.days for p in day_paths(data, d)]
    table = ds.dataset(paths, format="parquet", filesystem=filesystem).to_table(
        columns=["example_id", *EXAMPLE_COLUMNS])
    ids = table.column("example_id").to_numpy()
    order = np.argsort(ids, kind="stable")
    return ids[order], {k: table.column(k).to_numpy()[order] for k in EXAMPLE_COLUMNS}


def import_store(src: str | Path, out: str | Path, tasks: list[str], *,
                 trained_until_day: int, data: str | Path | None = None,
                 logit_columns: Mapping[str, str] | None = None, emb_column: str | None = "emb",
                 teacher_name: str = "external", emb_dtype: str = "float16",
                 overwrite: bool = False, batch_rows: int = 1 << 16) -> Manifest:
    """Write a teacher-output store from another system's Parquet predictions (``gemkd store
    import``). Every problem is one DataError or StoreError naming the file, column or
    example_id, with nothing written.

    Parameters
    ----------
    src
        A Parquet file or directory with ``example_id`` and one logit column per task.
    out
        The store to write.
    tasks
        The tasks, in the store's column order.
    trained_until_day
        The last day the predicting model trained on (the store's age).
    data
        The dataset the predictions are for: where day, domain, user_id and ts come from when
        ``src`` lacks them (by example_id).
    logit_columns
        Task → column of ``src`` (default ``logit_<task>``).
    emb_column
        The representation column, kept when present (None: none).
    teacher_name
        The name the manifest records.
    emb_dtype
        How the representation is stored: ``float16`` or ``int8``.
    overwrite
        Replace a store already at ``out``.
    batch_rows
        Rows written per shard batch.

    Returns
    -------
    Manifest
        The store's manifest.

    Raises
    ------
    DataError, StoreError
        Naming the file, column or example_id at fault.
    """
    src, out = Path(src), fs.as_where(out)
    if not tasks or len(set(tasks)) != len(tasks):
        raise DataError(f"--tasks must name distinct tasks, got {tasks!r}")
    dataset = _open(src)
    names = set(dataset.schema.names)
    logit_cols = {t: (logit_columns or {}).get(t, f"logit_{t}") for t in tasks}
    need = ["example_id", *logit_cols.values()]
    missing = [c for c in need if c not in names]
    if missing:
        raise DataError(f"{src}: column {missing[0]!r} missing (columns: "
                        f"{', '.join(sorted(names))})")
    has_emb = emb_column is not None and emb_column in names
    own_keys = all(k in names for k in EXAMPLE_COLUMNS)
    if not own_keys and data is None:
        absent = [k for k in EXAMPLE_COLUMNS if k not in names]
        raise DataError(f"{src}: no {absent[0]!r} column; pass --data DATASET to take day, "
                        "domain, user_id and ts from the dataset by example_id")
    cols = need + ([emb_column] if has_emb else []) + (list(EXAMPLE_COLUMNS) if own_keys else [])
    table = dataset.to_table(columns=cols)
    ids = table.column("example_id")
    if not pa.types.is_integer(ids.type) or ids.null_count:
        raise DataError(f"{src}: column 'example_id' must be non-null integers, got {ids.type}")
    ids = ids.to_numpy().astype(np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise DataError(f"{src}: example_id {int(uniq[np.argmax(counts > 1)])} appears "
                        f"{int(counts.max())} times; one prediction per example")
    logits = np.stack([_float_column(table, logit_cols[t], src) for t in tasks], axis=1)
    if own_keys:
        keys = {k: table.column(k).to_numpy(zero_copy_only=False) for k in EXAMPLE_COLUMNS}
    else:
        known, all_keys = _dataset_keys(fs.as_where(data))
        pos = np.minimum(np.searchsorted(known, ids), max(len(known) - 1, 0))
        found = (known[pos] == ids) if len(known) else np.zeros(len(ids), bool)
        if not found.all():
            raise DataError(f"{src}: example_id {int(ids[np.argmin(found)])} is not in the "
                            f"dataset {data}")
        keys = {k: v[pos] for k, v in all_keys.items()}
    if has_emb:
        emb_col = table.column(emb_column).combine_chunks()
        if not pa.types.is_list(emb_col.type) and not pa.types.is_fixed_size_list(emb_col.type):
            raise DataError(f"{src}: column {emb_column!r} is {emb_col.type}, expected a list "
                            "of floats per row")
        lengths = pc.list_value_length(emb_col).to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths.min() != lengths.max() or lengths.min() < 1):
            bad = int(np.argmax(lengths != lengths.max())) if lengths.min() >= 1 else \
                int(np.argmin(lengths))
            raise DataError(f"{src}: column {emb_column!r}: example_id {int(ids[bad])} has "
                            f"{int(lengths[bad])} values, others {int(lengths.max())}")
        emb = pc.list_flatten(emb_col).to_numpy(zero_copy_only=False).astype(np.float32)
        emb = emb.reshape(len(ids), int(lengths.max()) if len(lengths) else 1)
    else:
        emb = np.zeros((len(ids), 1), dtype=np.float32)
    order = np.argsort(ids, kind="stable")
    layer = emb_column if has_emb and emb_column is not None else NO_LAYER
    try:
        with StoreWriter(out, tasks, layer, emb.shape[1], emb_dtype, teacher_name=teacher_name,
                         teacher_version=_source_hash(src),
                         trained_until_day=trained_until_day, overwrite=overwrite,
                         extra={"imported_from": str(src)}) as writer:
            for i in range(0, len(ids), batch_rows):
                sel = order[i:i + batch_rows]
                writer.write(ids[sel], keys["day"][sel], keys["domain"][sel],
                             keys["user_id"][sel], keys["ts"][sel], logits[sel], emb[sel])
    except StoreError as e:
        raise StoreError(f"{src}: {e}") from None
    return Manifest.load(out)

"""Property: whatever a Parquet day file holds, the dataset reader either refuses it with a
``DataError`` naming the file, column and row, or yields exactly the file's values — never an
exception from inside numpy, pyarrow or torch.

Each example writes random valid rows with at most one fault (a wrong type, a missing column, a
null, a null inside a history list, a negative id, a label outside {0, 1}, a domain outside the
schema's, or event fields of different lengths) plus harmless variations (empty histories, an
extra column, history truncation, any batch size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.dataset_writer import day_path
from gemkd.transfer.data.schema import DatasetSchema, Feature
from gemkd.transfer.errors import DataError

DOMAINS = ["feed", "stories"]
TYPES = {"example_id": pa.int64(), "ts": pa.int64(), "day": pa.int32(), "domain": pa.int16(),
         "user_id": pa.int64(), "ad_id": pa.int64(), "bid": pa.float32(),
         "hist_item_id": pa.list_(pa.int64()), "hist_action": pa.list_(pa.int32()),
         "click": pa.int8()}
WRONG_TYPES = {"ts": pa.float64(), "domain": pa.int64(), "ad_id": pa.string(),
               "bid": pa.float64(), "click": pa.int32(), "hist_item_id": pa.list_(pa.int32()),
               "hist_action": pa.large_list(pa.int32())}
SCALAR_IDS = ["user_id", "ad_id", "domain"]
FAULTS = ["wrong_type", "missing", "null", "null_list", "null_event", "negative",
          "negative_event", "label", "domain_range", "misaligned"]


def schema(n: int) -> DatasetSchema:
    return DatasetSchema(
        source="synthetic", categorical=[Feature("user_id", 100), Feature("ad_id", 50)],
        dense=["bid"], sequence=[Feature("hist_item_id", 50), Feature("hist_action", 4)],
        tasks=["click"], domains=list(DOMAINS), days=[0], max_history=8,
        rows_per_day={"0": n})


ROW = st.fixed_dictionaries({
    "ts": st.integers(0, 2**40), "domain": st.integers(0, len(DOMAINS) - 1),
    "user_id": st.integers(0, 2**40), "ad_id": st.integers(0, 10**6),
    "bid": st.floats(-1e6, 1e6, width=32),
    "hist": st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), max_size=6),
    "click": st.integers(0, 1),
})


def columns(rows: list[dict]) -> dict[str, list]:
    """Python values per column, for rows numbered 0..n-1 on day 0."""
    return {"example_id": list(range(len(rows))), "ts": [r["ts"] for r in rows],
            "day": [0] * len(rows), "domain": [r["domain"] for r in rows],
            "user_id": [r["user_id"] for r in rows], "ad_id": [r["ad_id"] for r in rows],
            "bid": [r["bid"] for r in rows],
            "hist_item_id": [[e[0] for e in r["hist"]] for r in rows],
            "hist_action": [[e[1] for e in r["hist"]] for r in rows],
            "click": [r["click"] for r in rows]}


def inject(data: st.DataObject, cols: dict[str, list], fault: str
           ) -> tuple[str, str | None]:
    """Apply ``fault`` to the column values in place; returns the message it must produce
    and the column to cast to a wrong type, if any."""
    n = len(cols["example_id"])
    if fault == "wrong_type":
        name = data.draw(st.sampled_from(sorted(WRONG_TYPES)), label="column")
        return f"column {name!r} has type ", name
    if fault == "missing":
        name = data.draw(st.sampled_from(sorted(TYPES)), label="column")
        del cols[name]
        return f"column {name!r} missing", None
    if n == 0:
        return "no rows", None
    row = data.draw(st.integers(0, n - 1), label="row")
    if fault in ("null", "null_list"):
        names = (["ts", "domain", "user_id", "ad_id", "bid", "click"] if fault == "null"
                 else ["hist_item_id", "hist_action"])
        name = data.draw(st.sampled_from(names), label="column")
        cols[name][row] = None
        return f"column {name!r} row {row}: null value", None
    if fault in ("null_event", "negative_event"):
        if not cols["hist_item_id"][row]:  # give the row an event to damage
            cols["hist_item_id"][row], cols["hist_action"][row] = [7], [1]
        name = data.draw(st.sampled_from(["hist_item_id", "hist_action"]), label="field")
        pos = data.draw(st.integers(0, len(cols[name][row]) - 1), label="event")
        if fault == "null_event":
            cols[name][row][pos] = None
            return f"column {name!r} row {row}: null value in the list", None
        value = -data.draw(st.integers(1, 2**31 - 1), label="negative id")
        cols[name][row][pos] = value
        return f"column {name!r} row {row}: negative id {value}", None
    if fault == "negative":
        name = data.draw(st.sampled_from(SCALAR_IDS), label="column")
        value = -data.draw(st.integers(1, 2**15 if name == "domain" else 2**62), label="id")
        cols[name][row] = value
        return f"column {name!r} row {row}: negative id {value}", None
    if fault == "label":
        value = data.draw(st.sampled_from([-1, 2, 3, 127]), label="label")
        cols["click"][row] = value
        return f"column 'click' row {row}: label {value} outside {{0, 1}}", None
    if fault == "domain_range":
        value = data.draw(st.integers(len(DOMAINS), 2**15 - 1), label="domain")
        cols["domain"][row] = value
        return f"column 'domain' row {row}: {value} is not one of the 2 domains", None
    assert fault == "misaligned"
    cols["hist_action"][row] = cols["hist_action"][row] + [0]
    return f"column 'hist_action' row {row}: length differs from 'hist_item_id'", None


def write(root: Path, cols: dict[str, list], wrong: str | None, extra: bool) -> Path:
    """The day file of ``cols`` (``wrong``: that column cast to its wrong type) and a
    schema.json for it."""
    n = len(next(iter(cols.values())))
    arrays = {k: pa.array(v, type=TYPES[k]) for k, v in cols.items()}
    if wrong is not None:
        arrays[wrong] = pc.cast(arrays[wrong], WRONG_TYPES[wrong], safe=False)
    if extra:
        arrays["unused"] = pa.array(np.arange(n, dtype=np.float64))
    path = day_path(root, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(arrays), path)
    schema(n).save(root)  # last, as every writer: it records the file's sha256
    return path


def read_all(root: Path, batch_size: int, max_seq_len: int | None) -> dict[str, np.ndarray]:
    """Every batch of the reader, concatenated; histories as one list of events per row."""
    batches = list(DatasetReader(root, batch_size=batch_size, max_seq_len=max_seq_len))
    assert all(len(b) <= batch_size for b in batches)
    cat = lambda f: torch.cat([f(b) for b in batches]).numpy()  # noqa: E731
    hist = []
    for b in batches:
        off = b.seq_offsets.numpy()
        items, actions = b.seq_values["hist_item_id"].numpy(), b.seq_values["hist_action"].numpy()
        hist += [list(zip(items[lo:hi].tolist(), actions[lo:hi].tolist(), strict=True))
                 for lo, hi in zip(off[:-1], off[1:], strict=True)]
    return {"example_id": cat(lambda b: b.example_id), "ts": cat(lambda b: b.ts),
            "day": cat(lambda b: b.day), "domain": cat(lambda b: b.domain),
            "user_id": cat(lambda b: b.user_id), "categorical": cat(lambda b: b.categorical),
            "bid": cat(lambda b: b.dense[:, 0]), "click": cat(lambda b: b.labels[:, 0]),
            "hist": hist}


@pytest.mark.parametrize("fault", [None, *FAULTS])  # every kind gets its own examples
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=12), extra=st.booleans(), batch_size=st.integers(1, 8),
       max_seq_len=st.none() | st.integers(0, 3), data=st.data())
def test_reader_refuses_or_reads_exactly(tmp_path_factory, capsys, fault, rows, extra,
                                         batch_size, max_seq_len, data):
    root = tmp_path_factory.mktemp("rows")
    cols = columns(rows)
    message, wrong = inject(data, cols, fault) if fault else ("", None)
    if not rows and not message:
        message = "no rows"
    path = write(root, cols, wrong, extra)
    if wrong is not None:  # the type as Parquet stores it, then the schema's
        message += f"{pq.read_schema(path).field(wrong).type}, expected {TYPES[wrong]}"
    capsys.readouterr()
    try:
        got = read_all(root, batch_size, max_seq_len)
    except DataError as e:
        assert message, f"valid rows refused: {e}"
        assert str(e).startswith(f"{path}: {message}"), (str(e), message)
        assert main(["data", "validate", str(root)]) == 2  # the CLI: the same one line
        assert capsys.readouterr().err == f"error: {e}\n"
        return
    assert not message, f"not refused: {message}"
    assert main(["data", "validate", str(root)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {len(rows)} rows")
    np.testing.assert_array_equal(got["example_id"], np.arange(len(rows)))
    for name in ("ts", "day", "domain", "user_id", "click"):
        np.testing.assert_array_equal(got[name], np.array(cols[name], dtype=np.int64), name)
    np.testing.assert_array_equal(got["bid"], np.array(cols["bid"], dtype=np.float32))
    np.testing.assert_array_equal(got["categorical"],
                                  np.array([cols["user_id"], cols["ad_id"]]).T.reshape(-1, 2))
    keep = len if max_seq_len is None else (lambda h: min(len(h), max_seq_len))
    assert got["hist"] == [r["hist"][len(r["hist"]) - keep(r["hist"]):] for r in rows]

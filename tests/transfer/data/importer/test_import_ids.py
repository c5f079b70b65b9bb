"""Id columns in ``gemkd data import``: dense codes by default (tables sized to the data), raw
ids or hashing when the mapping asks, and a clear error for a bad ``ids`` entry."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.importer.encode import hashed
from gemkd.transfer.data.schema import DatasetSchema
from tests.conftest import dataset_table

T0 = 1_700_000_000
USERS = [1_003_694, 2_500_000, 1_003_694, 7_000_001, 2_500_000, 1_003_694]
ITEMS = [5_162_994, 3_000_000, 3_000_000, 5_162_994, 9_999_999, 4_000_000]
LOG = pd.DataFrame({"t": [T0 + 60 * i for i in range(6)], "uid": USERS, "iid": ITEMS,
                    "bought": [1, 0, 0, 1, 0, 1]})
MAPPING = {"source": "shop", "time": "t", "days": {"buckets": 2}, "user": "uid", "item": "iid",
           "labels": {"buy": "bought"}, "history": {"fields": {"item_id": "item"}}}


def imported(tmp_path: Path, capsys, mapping: dict = MAPPING, log: pd.DataFrame = LOG
             ) -> tuple[DatasetSchema, pd.DataFrame, str]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    log.to_csv(src / "log.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(out)]) == 0, capsys.readouterr().err
    return DatasetSchema.load(out), dataset_table(out).to_pandas(), capsys.readouterr().out


def test_ids_in_the_millions_get_tables_of_distinct_plus_one(tmp_path, capsys):
    schema, t, _ = imported(tmp_path, capsys)
    cards = {f.name: f.cardinality for f in [*schema.categorical, *schema.sequence]}
    assert cards == {"user_id": 4, "item_id": 5, "hist_item_id": 5}  # 3 users, 4 items, + row 0
    users, items = np.unique(USERS), np.unique(ITEMS)
    assert list(t["user_id"]) == [int(np.searchsorted(users, u)) + 1 for u in USERS]
    assert list(t["item_id"]) == [int(np.searchsorted(items, x)) + 1 for x in ITEMS]
    assert [list(h) for h in t["hist_item_id"]] == [[], [], [3], [], [1], [3, 1]]
    assert main(["data", "summary", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    rows = printed.split("tables (rows of each feature's embedding table")[1].splitlines()
    assert rows[2].split() == ["user_id", "categorical", "4"]
    assert rows[3].split() == ["item_id", "categorical", "5"]
    assert rows[4].split() == ["hist_item_id", "sequence", "5"]


def test_raw_ids_on_request(tmp_path, capsys):
    m = copy.deepcopy(MAPPING)
    m["user"] = {"column": "uid", "ids": "raw"}
    schema, t, _ = imported(tmp_path, capsys, m)
    assert list(t["user_id"]) == USERS and schema.categorical[0].cardinality == 7_000_002
    assert schema.categorical[1].cardinality == 5  # item: still dense


def test_hashed_ids_report_their_collision_rate(tmp_path, capsys):
    m = copy.deepcopy(MAPPING)
    m["item"] = {"column": "iid", "ids": "hash", "buckets": 2}
    schema, t, printed = imported(tmp_path, capsys, m)
    h = hashed(pd.Series(ITEMS), 2)
    assert list(t["item_id"]) == list(h.codes) and set(h.codes) <= {1, 2}
    assert schema.categorical[1].cardinality == 3  # 2 buckets + row 0
    # 4 distinct items in 2 buckets: at least 3 of them share a bucket
    assert h.distinct == 4 and h.shared >= 3
    note = (f"ids: item ids hashed into 2 buckets: {h.shared} of 4 distinct ids "
            f"({100 * h.shared / 4:.2f} %) share a bucket with another id")
    assert f"note: {note}" in printed
    assert any(n.startswith(note) for n in schema.generator["notes"])


def test_hash_is_of_the_value_text_and_counts_collisions():
    a = hashed(pd.Series([12, 7, 12]), 1000)
    b = hashed(pd.Series(["12", "7", "12"]), 1000)
    assert list(a.codes) == list(b.codes) and a.codes[0] == a.codes[2]
    one = hashed(pd.Series(["a", "b", "c", "a"]), 1)
    assert list(one.codes) == [1, 1, 1, 1] and (one.distinct, one.shared) == (3, 3)
    assert one.collision_rate == 1.0
    many = hashed(pd.Series(np.arange(1000)), 10**9)
    assert many.shared == 0 and many.cardinality == 10**9 + 1


@pytest.mark.parametrize("entry,expect", [
    ({"column": "uid", "ids": "hashed"}, "key 'user.ids': 'hashed' is not one of dense, raw, hash"),
    ({"column": "uid", "ids": "hash"}, "key 'user.buckets': missing (required with ids: hash"),
    ({"column": "uid", "ids": "hash", "buckets": 0},
     "key 'user.buckets': expected an integer >= 1"),
    ({"column": "uid", "buckets": 10}, "key 'user.buckets': only with ids: hash (here ids: dense)"),
    ({"column": "uid", "ids": "raw", "codes": True}, "key 'user.codes': give 'ids'"),
    ({"column": "uid", "id": "raw"}, "key 'user.id': unknown key; valid keys here: column, ids"),
])
def test_bad_ids_entry_is_a_mapping_error(tmp_path, capsys, entry, expect):
    m = copy.deepcopy(MAPPING)
    m["user"] = entry
    src = tmp_path / "src"
    src.mkdir()
    LOG.to_csv(src / "log.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {expect}" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_older_codes_spelling_still_reads(tmp_path, capsys):
    m = copy.deepcopy(MAPPING)
    m["user"] = {"column": "uid", "codes": False}
    schema, t, _ = imported(tmp_path, capsys, m)
    assert list(t["user_id"]) == USERS
    assert schema.generator["mapping"]["user"] == {"column": "uid", "ids": "raw"}

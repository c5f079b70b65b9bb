"""``gemkd data import`` keeps each encoded column's raw value → code vocabulary beside the
dataset (``vocab/``, digests in schema.json): the in-memory, streamed and Ray imports keep the
same ones, they give every row of the log the code the dataset holds, a changed file is caught,
and synthetic data lists none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gemkd.transfer.data import vocabulary
from gemkd.transfer.data.audit import validate_dataset
from gemkd.transfer.data.importer import import_logs, load_mapping, parse_mapping
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError, DataError
from tests.conftest import dataset_table
from tests.transfer.data.importer import test_import
from tests.transfer.data.importer.test_import_ray import ray_local  # noqa: F401 - the module's Ray fixture
from tests.transfer.data.importer.test_import_stream import assert_same_bytes


def _mapping(path: Path, **changes):
    raw = {**test_import.MAPPING, **changes}
    return parse_mapping(raw, str(path))


def _logged(src: Path) -> pd.DataFrame:
    """The log's rows in the dataset's order (time, stable) with their items' brands."""
    log = test_import.LOG.iloc[np.argsort(test_import.LOG["event_time"].to_numpy(),
                                          kind="stable")].reset_index(drop=True)
    return log.merge(test_import.ITEMS, how="left", left_on="item", right_on="item_id")


def _vocabs(root: Path) -> dict[str, vocabulary.Vocabulary]:
    entries = DatasetSchema.load(root).vocabularies
    return {c: vocabulary.load_vocabulary(root, c, entries) for c in entries}


def test_every_row_gets_its_codes_from_the_vocabularies(tmp_path):
    src, path = test_import.setup(tmp_path)
    out = tmp_path / "out"
    import_logs(src, load_mapping(path), out, streaming=False)
    schema = DatasetSchema.load(out)
    assert set(schema.vocabularies) == {"user_id", "item_id", "domain", "country", "brand",
                                        "hist_item_id", "hist_brand"}
    assert {e["file"] for e in schema.vocabularies.values()} == {
        f"vocab/{c}.parquet" for c in ("user_id", "item_id", "domain", "country", "brand")}
    v = _vocabs(out)
    t = dataset_table(out).to_pandas()
    log = _logged(src)
    for column, raw in (("user_id", log["user"]), ("item_id", log["item"]),
                        ("country", log["country"]), ("brand", log["brand"]),
                        ("domain", log["surface"])):
        got = vocabulary.encode(v[column], raw, column)
        assert list(got) == list(t[column]), column
    assert t["country"][log["country"].isna()].eq(0).all()  # missing: code 0, as the import
    # an id the log never had: the import's unknown row; a rare domain value: ``other``
    assert list(vocabulary.encode(v["item_id"], [12, 7, 99], "item_id")) == [3, 0, 5]
    other = schema.domains.index("other")
    assert list(vocabulary.encode(v["domain"], ["feed", "ads", "mail"])) == [
        schema.domains.index("feed"), other, other]
    # a history field reads its column's vocabulary
    assert schema.vocabularies["hist_item_id"] == schema.vocabularies["item_id"]


def test_hash_raw_split_and_log2_rules(tmp_path):
    log = test_import.LOG.assign(tags=["a,b", "b", None, "c,a", "a", "b,c", "c", "a"],
                                 views=[0, 3, 8, None, 1, 100, 2, 5])
    src, _ = test_import.setup(tmp_path, log=log)
    m = _mapping(tmp_path / "m.yaml", user={"column": "user", "ids": "raw"},
                 item={"column": "item", "ids": "hash", "buckets": 7},
                 categorical=["country", {"column": "tags", "split": ","},
                              {"column": "views", "bucket": "log2"}])
    out = tmp_path / "out"
    import_logs(src, m, out, streaming=False)
    e = DatasetSchema.load(out).vocabularies
    assert e["user_id"] == {"rule": "raw", "source": e["user_id"]["source"]}
    assert e["views"]["rule"] == "log2" and "file" not in e["views"]
    assert e["item_id"]["rule"] == "hash" and e["item_id"]["buckets"] == 7
    assert e["tags"]["split"] == ","
    v = _vocabs(out)
    assert sorted(v["item_id"].values) == ["10", "11", "12", "13", "99"]  # the ids seen
    t = dataset_table(out).to_pandas()
    order = np.argsort(log["event_time"].to_numpy(), kind="stable")
    logged = log.iloc[order].reset_index(drop=True)
    for column, raw in (("user_id", logged["user"]), ("item_id", logged["item"]),
                        ("tags", logged["tags"]), ("views", logged["views"])):
        assert list(vocabulary.encode(v[column], raw, column)) == list(t[column]), column
    unseen = vocabulary.encode(v["item_id"], [123456], "item_id")
    assert 1 <= unseen[0] <= 7  # a hashed id always has a bucket
    with pytest.raises(ValueError, match=r"column 'user_id': value 'x' \(position 1\)"):
        vocabulary.encode(v["user_id"], [1, "x"], "user_id")


def test_in_memory_streamed_and_ray_keep_the_same_vocabularies(tmp_path, ray_local):  # noqa: F811
    src, path = test_import.setup(tmp_path)
    m = load_mapping(path)
    dirs = [tmp_path / n for n in ("memory", "streamed", "ray")]
    import_logs(src, m, dirs[0], streaming=False)
    import_logs(src, m, dirs[1], batch_rows=3)
    import_logs(src, m, dirs[2], batch_rows=3, engine="ray")
    tables = [_vocabs(d) for d in dirs]
    assert set(tables[0]) == {"user_id", "item_id", "domain", "country", "brand",
                              "hist_item_id", "hist_brand"}
    for other in tables[1:]:
        assert set(other) == set(tables[0])
        for c, v in tables[0].items():
            w = other[c]
            assert (v.rule, v.unknown, v.source) == (w.rule, w.unknown, w.source), c
            assert list(v.values) == list(w.values) and list(v.codes) == list(w.codes), c
    for d in dirs[1:]:
        for f in (dirs[0] / "vocab").iterdir():
            assert f.read_bytes() == (d / "vocab" / f.name).read_bytes(), f.name
    assert_same_bytes(dirs[1], dirs[2])


def test_a_changed_or_missing_vocabulary_file_is_named(tmp_path):
    src, path = test_import.setup(tmp_path)
    out = tmp_path / "out"
    import_logs(src, load_mapping(path), out)
    validate_dataset(out)  # as written: every file checks
    entries = DatasetSchema.load(out).vocabularies
    f = out / "vocab" / "user_id.parquet"
    good = f.read_bytes()
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"value": [1, 2, 3], "code": [1, 3, 2]}), f)  # swapped codes
    with pytest.raises(DataError, match=r"user_id\.parquet: sha256 .* differs"):
        vocabulary.load_vocabulary(out, "user_id", entries)
    with pytest.raises(DataError, match=r"user_id\.parquet: sha256"):
        validate_dataset(out)
    f.write_bytes(good)
    (out / "vocab" / "brand.parquet").unlink()
    with pytest.raises(DataError, match=r"brand\.parquet: missing"):
        vocabulary.load_vocabulary(out, "hist_brand", entries)
    with pytest.raises(ConfigError, match=r"no id vocabulary for column 'price'"):
        vocabulary.load_vocabulary(out, "price", entries)


def test_synthetic_data_lists_no_vocabularies(tiny_data, tmp_path):
    raw = json.loads((tiny_data / "schema.json").read_text())
    assert "vocabularies" not in raw
    assert not (tiny_data / "vocab").exists()
    copy = tmp_path / "tiny"
    shutil.copytree(tiny_data, copy)
    with pytest.raises(ConfigError, match="synthetic dataset has no raw ids"):
        vocabulary.load_vocabulary(copy, "user_id", DatasetSchema.load(copy).vocabularies)

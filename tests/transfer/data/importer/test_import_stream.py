"""The streaming import (importer/stream.py) writes the very dataset of the in-memory import,
byte for byte, for every mapping feature the import tests cover; a day split into part files
reads as one day."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.transfer.data import dataset_writer as writer
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.importer import import_logs, load_mapping, stream
from gemkd.transfer.data.kuairand import kuairand_mapping
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import DataError
from tests.conftest import KUAIRAND_MAPPING, ROOT, dataset_table
from tests.transfer.data import test_kuairand
from tests.transfer.data.importer import test_import, test_import_days, test_import_ids

T0 = 1_700_000_000


def both(tmp_path: Path, src: Path, mapping, notes: list[str] | None = None,
         batch_rows: int = 3) -> tuple[Path, Path]:
    """The dataset imported in memory and streamed ``batch_rows`` rows at a time."""
    a, b = tmp_path / "in_memory", tmp_path / "streamed"
    one = import_logs(src, mapping, a, notes=notes, streaming=False)
    two = import_logs(src, mapping, b, notes=notes, batch_rows=batch_rows)
    assert one.notes == two.notes
    return a, b


def assert_same_bytes(a: Path, b: Path) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert any(str(f).endswith(".parquet") for f in files)
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def mapping_file(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_side_tables_labels_buckets_history_fields(tmp_path):
    src, path = test_import.setup(tmp_path)
    assert_same_bytes(*both(tmp_path, src, load_mapping(path)))


def test_parquet_input(tmp_path):
    src, path = test_import.setup(tmp_path, parquet=True)
    assert_same_bytes(*both(tmp_path, src, load_mapping(path), batch_rows=2))


def test_iso_times_and_text_ids(tmp_path):
    log = pd.DataFrame({
        "when": ["2024-03-01T23:30:00", "2024-03-01T22:45:00Z", "2024-03-02 08:00",
                 "2024-03-03T00:10:00+01:00"],
        "who": ["bob", "al", "bob", "al"], "what": ["x", "y", "x", "z"], "ok": [1, 0, 1, 1]})
    m = {"time": {"column": "when", "unit": "iso", "timezone": "Europe/Paris"},
         "days": {"calendar": "Europe/Paris"}, "user": "who", "item": "what",
         "labels": {"ok": "ok"}, "history": {"fields": {"item_id": "item", "age": "age"}}}
    src, path = test_import.setup(tmp_path, m, log)
    assert_same_bytes(*both(tmp_path, src, load_mapping(path), batch_rows=1))


def test_docs_example_split_and_log2(tmp_path):
    example = ROOT / "docs" / "examples" / "my_logs"
    assert_same_bytes(*both(tmp_path, example, load_mapping(example / "mapping.yaml"),
                            batch_rows=5))


@pytest.mark.parametrize("ids", [{"ids": "hash", "buckets": 3}, {"ids": "raw"}])
def test_hashed_and_raw_ids(tmp_path, ids):
    m = copy.deepcopy(test_import_ids.MAPPING)
    m["item"] = {"column": "iid", **ids}
    src = tmp_path / "src"
    src.mkdir()
    test_import_ids.LOG.to_csv(src / "log.csv", index=False)
    assert_same_bytes(*both(tmp_path, src, load_mapping(mapping_file(tmp_path, m))))


@pytest.mark.parametrize("days", [{"calendar": "UTC"},
                                  {"calendar": "UTC", "from": "2024-06-01", "to": "2024-06-08"}])
def test_straggler_days_and_a_date_range(tmp_path, days):
    src = tmp_path / "src"
    src.mkdir()
    test_import_days.stragglers().to_csv(src / "log.csv", index=False)
    m = {**test_import_days.MAPPING, "days": days,
         "history": {"max_events": 4, "fields": {"item_id": "item", "click": {"label": "click"},
                                                 "age": "age"}}}
    assert_same_bytes(*both(tmp_path, src, load_mapping(mapping_file(tmp_path, m)),
                            batch_rows=500))


def test_kuairand_levels_date_column_and_optional_sides(tmp_path):
    src = tmp_path / "src"
    test_kuairand.write_log(src)
    test_kuairand.write_features(src)
    m, notes = kuairand_mapping(src, load_mapping(KUAIRAND_MAPPING), None, 0.01, 1024)
    assert_same_bytes(*both(tmp_path, src, m, notes, batch_rows=4))


def many_log() -> pd.DataFrame:
    """5,000 unsorted rows over 12 days with minute ties, 40 users, 4 surfaces (one rare)."""
    rng = np.random.default_rng(3)
    n = 5000
    return pd.DataFrame({
        "t": T0 + 60 * rng.integers(0, 12 * 1440, n), "user": rng.integers(0, 40, n) * 1000,
        "item": rng.zipf(1.5, n) % 300, "surface": rng.choice(["a", "b", "c", "d"], n,
                                                               p=[.5, .3, .19, .01]),
        "click": rng.integers(0, 2, n), "dwell": rng.exponential(20, n)})


#: :func:`many_log`'s mapping: domains by share, a bucketed dense column, histories of 6
MANY = {"time": "t", "user": "user", "item": "item",
        "domain": {"column": "surface", "min_share": 0.05},
        "labels": {"click": "click"}, "categorical": [{"column": "dwell", "bucket": "log2"}],
        "history": {"max_events": 6, "fields": {"item_id": "item", "click": {"label": "click"},
                                                "dwell": {"feature": "dwell"},
                                                "surface": "domain", "age": "age"}}}


def test_many_users_and_dates_carry_histories_across_dates(tmp_path):
    """:func:`many_log` in a CSV and a Parquet file: every date's histories reach into earlier
    dates through the carried state."""
    log = many_log()
    src = tmp_path / "src"
    src.mkdir()
    log.iloc[:2000].to_csv(src / "a.csv", index=False)
    log.iloc[2000:].to_parquet(src / "b.parquet", index=False)
    assert_same_bytes(*both(tmp_path, src, load_mapping(mapping_file(tmp_path, MANY)),
                            batch_rows=777))


def test_a_day_in_part_files_reads_as_one_day(tmp_path, monkeypatch):
    """Row groups of 4 rows, parts of 8: a day of 20 rows is parts 0..2, read as one day."""
    monkeypatch.setattr(stream, "ROW_GROUP_SIZE", 4)
    monkeypatch.setattr(writer, "ROW_GROUP_SIZE", 4)
    src, path = test_import.setup(tmp_path)
    log = pd.concat([test_import.LOG.assign(event_time=test_import.LOG["event_time"] + 1000 * k)
                     for k in range(5)], ignore_index=True)
    log.to_csv(src / "log.csv", index=False)
    whole = import_logs(src, load_mapping(path), tmp_path / "whole", streaming=False)
    parts = import_logs(src, load_mapping(path), tmp_path / "parts", batch_rows=7, part_rows=8)
    assert whole.schema.rows_per_day == parts.schema.rows_per_day == {"0": 20, "1": 20}
    names = sorted(p.name for p in (tmp_path / "parts" / "day=0").iterdir())
    assert names == ["part-0.parquet", "part-1.parquet", "part-2.parquet"]
    assert dataset_table(tmp_path / "parts").equals(dataset_table(tmp_path / "whole"))
    got = [b.example_id.tolist() for b in DatasetReader(tmp_path / "parts", batch_size=3)]
    assert sum(got, []) == list(range(40))
    assert DatasetSchema.load(tmp_path / "parts").n_rows == 40
    units = DatasetReader(tmp_path / "parts", batch_size=3).units
    assert [(Path(u.path).name, u.first_row) for u in units if u.day == 0] == [
        ("part-0.parquet", 0), ("part-0.parquet", 4), ("part-1.parquet", 0),
        ("part-1.parquet", 4), ("part-2.parquet", 0)]  # errors name a file's own row
    (tmp_path / "parts" / "day=0" / "part-2.parquet").unlink()
    with pytest.raises(DataError, match=r"day=0 \(2 part files\): has 16 rows, schema.json "
                                        "says 20"):
        DatasetReader(tmp_path / "parts", batch_size=3)


def test_part_rows_must_fill_row_groups(tmp_path):
    src, path = test_import.setup(tmp_path)
    with pytest.raises(ValueError, match="part_rows must be a positive multiple of 16384"):
        import_logs(src, load_mapping(path), tmp_path / "out", part_rows=1000)
    assert not (tmp_path / "out").exists()


def test_errors_name_the_files_own_row(tmp_path, capsys):
    """Read 2 rows at a time, a bad value on line 7 is still named line 7."""
    from gemkd.experiments.cli import main

    src, path = test_import.setup(tmp_path)
    bad = test_import.LOG.assign(clicked=[1, 0, 1, 0, 1, 2, 0, 1])
    bad.to_csv(src / "log.csv", index=False)
    with pytest.raises(DataError, match=r"log.csv: column 'clicked' line 7: 2 is not 0 or 1"):
        import_logs(src, load_mapping(path), tmp_path / "out", batch_rows=2)
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(tmp_path / "out")]) == 2
    assert "line 7: 2 is not 0 or 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

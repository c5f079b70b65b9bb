"""``gemkd data import``: a mapping file turns any event log into the gemkd schema."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from tests.conftest import ROOT, dataset_table

T0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC: times must be plausible epoch seconds
LOG = pd.DataFrame({
    "event_time": [T0 + s for s in (500, 100, 300, 300, 200, 400, 600, 700)],
    "user": [1, 1, 2, 1, 2, 1, 2, 3],
    "item": [11, 10, 12, 12, 10, 13, 99, 10],
    "rating": [5.0, 3.0, 4.0, 1.5, 4.5, 4.0, 2.0, 5.0],
    "clicked": [1, 0, 1, 0, 1, 1, 0, 1],
    "country": ["fr", "de", None, "fr", "de", "fr", "it", "fr"],
    "price": [10.0, 0.0, 3.0, 3.0, None, 7.0, 1.0, 0.5],
    "surface": ["feed", "feed", "feed", "search", "feed", "feed", "ads", "feed"],
})
ITEMS = pd.DataFrame({"item_id": [10, 11, 12, 13], "brand": ["b", "a", "b", "c"],
                      "weight": [1.0, 2.0, None, 4.0]})
MAPPING = {
    "source": "shop",
    "time": {"column": "event_time", "unit": "s"},
    "days": {"buckets": 2},
    "user": "user",
    "item": "item",
    "domain": {"column": "surface", "min_share": 0.2},
    "labels": {"like": {"column": "rating", "op": ">=", "value": 4}, "click": "clicked"},
    "categorical": ["country"],
    "dense": [{"column": "price", "transform": "log1p"}],
    "history": {"max_events": 2, "fields": {"item_id": "item", "like": {"label": "like"},
                                            "brand": {"feature": "brand"}, "age": "age"}},
    "side_tables": [{"path": "items.csv", "key": "item_id", "on": "item",
                     "categorical": ["brand"], "dense": ["weight"]}],
}


def setup(tmp_path: Path, mapping: dict = MAPPING, log: pd.DataFrame = LOG,
          parquet: bool = False) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    if parquet:
        log.to_parquet(src / "log.parquet", index=False)
    else:
        log.to_csv(src / "log.csv", index=False)
    if mapping.get("side_tables"):
        ITEMS.to_csv(src / "items.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return src, path


def run(capsys, src: Path, mapping: Path, out: Path) -> tuple[DatasetSchema, pd.DataFrame]:
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert sum(len(b) for b in DatasetReader(out, batch_size=3)) > 0  # validates every row
    return DatasetSchema.load(out), dataset_table(out).to_pandas()


@pytest.mark.parametrize("days, unit", [({"buckets": 2}, "2 buckets"),
                                        ({"calendar": "UTC"}, "1 day")])
def test_the_last_line_counts_buckets_or_days(tmp_path, capsys, days, unit):
    """A bucketed import's days are equal-count time buckets: its last line says so."""
    src, mapping = setup(tmp_path, {**MAPPING, "days": days})
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(tmp_path / "out")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"wrote 8 examples over {unit}, tasks ['like', 'click']"), last
    assert ("day" in last.split(", to ")[0]) == ("day" in unit)


def test_threshold_label_side_table_history(tmp_path, capsys):
    src, mapping = setup(tmp_path)
    schema, t = run(capsys, src, mapping, tmp_path / "out")
    order = np.argsort(LOG["event_time"].to_numpy(), kind="stable")
    log = LOG.iloc[order].reset_index(drop=True)
    assert schema.source == "shop" and schema.tasks == ["like", "click"]
    assert list(t["example_id"]) == list(range(8)) and list(t["ts"]) == list(log["event_time"])
    assert list(t["like"]) == list((log["rating"] >= 4).astype(int))
    assert list(t["click"]) == list(log["clicked"])
    assert schema.domains == ["feed", "other"]  # search and ads are 1/8 each < 0.2
    assert list(t["domain"]) == list((log["surface"] != "feed").astype(int))
    assert list(t["day"]) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [f.name for f in schema.categorical] == ["user_id", "item_id", "country", "brand"]
    assert list(t["country"]) == [1, 1, 0, 2, 2, 2, 3, 2]  # de, fr, it; missing → 0
    assert list(t["brand"]) == [2, 2, 2, 2, 3, 1, 0, 2]  # a, b, c; item 99 unknown → 0
    assert schema.dense == ["price", "weight"]
    assert np.allclose(t["price"], np.log1p(log["price"].fillna(0)))
    assert np.allclose(t["weight"], [1, 1, 0, 0, 4, 2, 0, 1])
    # ids are dense codes in sorted order: users 1 2 3, items 10 11 12 13 99 → 1..5
    assert list(t["user_id"]) == list(log["user"])
    assert list(t["item_id"]) == list(log["item"].map({10: 1, 11: 2, 12: 3, 13: 4, 99: 5}))
    assert [(f.name, f.cardinality) for f in schema.categorical[:2]] == [("user_id", 4),
                                                                         ("item_id", 6)]
    # in time order users are 1 2 2 1 1 1 2 3; histories hold the 2 most recent earlier events
    assert [list(h) for h in t["hist_item_id"]] == [[], [], [1], [1], [1, 3], [3, 4],
                                                    [1, 3], []]
    assert [list(h) for h in t["hist_like"]] == [[], [], [1], [0], [0, 0], [0, 1], [1, 1], []]
    assert [list(h) for h in t["hist_brand"]] == [[], [], [2], [2], [2, 2], [2, 3], [2, 2], []]
    assert {f.name: f.cardinality for f in schema.sequence} == {
        "hist_item_id": 6, "hist_like": 2, "hist_brand": 4, "hist_age": 16}


def test_parquet_input_gives_the_same_dataset(tmp_path, capsys):
    src, mapping = setup(tmp_path / "a")
    _, from_csv = run(capsys, src, mapping, tmp_path / "csv")
    src, mapping = setup(tmp_path / "b", parquet=True)
    _, from_parquet = run(capsys, src, mapping, tmp_path / "pq")
    pd.testing.assert_frame_equal(from_csv, from_parquet)


def test_no_user_column_means_no_history(tmp_path, capsys):
    m = {"time": {"column": "event_time"}, "labels": {"click": "clicked"}, "item": "item"}
    src, mapping = setup(tmp_path, m, LOG.drop(columns=["user"]))
    schema, t = run(capsys, src, mapping, tmp_path / "out")
    assert schema.sequence == [] and schema.domains == ["all"] and schema.source == "map"
    assert (t["user_id"] == 0).all() and [f.name for f in schema.categorical] == ["item_id"]
    assert main(["data", "summary", str(tmp_path / "out")]) == 0


def test_iso_times_calendar_days_and_string_ids(tmp_path, capsys):
    log = pd.DataFrame({
        "when": ["2024-03-01T23:30:00", "2024-03-01T22:45:00Z", "2024-03-02 08:00",
                 "2024-03-03T00:10:00+01:00"],
        "who": ["bob", "al", "bob", "al"], "what": ["x", "y", "x", "z"], "ok": [1, 0, 1, 1]})
    m = {"time": {"column": "when", "unit": "iso", "timezone": "Europe/Paris"},
         "days": {"calendar": "Europe/Paris"}, "user": {"column": "who", "codes": True},
         "item": {"column": "what", "codes": True}, "labels": {"ok": "ok"},
         "history": {"fields": {"item_id": "item"}}}
    src, mapping = setup(tmp_path, m, log)
    schema, t = run(capsys, src, mapping, tmp_path / "out")
    utc = pd.to_datetime(["2024-03-01T22:30Z", "2024-03-01T22:45Z", "2024-03-02T07:00Z",
                          "2024-03-02T23:10Z"])
    assert list(t["ts"]) == [int(x.timestamp()) for x in utc]
    assert list(t["day"]) == [0, 0, 1, 2]  # Paris dates 03-01, 03-01, 03-02, 03-03
    assert list(t["user_id"]) == [2, 1, 2, 1] and list(t["item_id"]) == [1, 2, 1, 3]
    assert [list(h) for h in t["hist_item_id"]] == [[], [], [1], [2]]
    assert schema.categorical[0].cardinality == 3


def test_parquet_timestamp_column(tmp_path, capsys):
    hours = pd.to_timedelta(LOG["event_time"] - T0, unit="h")
    log = LOG.assign(event_time=pd.Timestamp("2024-01-01") + hours)
    m = {"time": {"column": "event_time", "timezone": "America/New_York"},
         "labels": {"click": "clicked"}}
    src, mapping = setup(tmp_path, m, log, parquet=True)
    _, t = run(capsys, src, mapping, tmp_path / "out")
    first = pd.Timestamp("2024-01-01 05:00Z") + pd.Timedelta(hours=100)  # 00:00 EST = 05:00 UTC
    assert t["ts"].iloc[0] == int(first.timestamp())
    assert list(t["day"]) == [0, 4, 8, 8, 12, 17, 21, 25]  # UTC dates (days' default)


BAD = [  # (change to MAPPING, words the one-line error must contain)
    (lambda m: m.update(labelz={}), ["key 'labelz': unknown key"]),
    (lambda m: m["labels"]["like"].update(threshold=4), ["key 'labels.like.threshold'"]),
    (lambda m: m.update(categorical=["contry"]),
     ["key 'categorical[0].column'", "column 'contry' is not in", "log.csv"]),
    (lambda m: m["labels"].update(like="rating"),
     ["log.csv: column 'rating' line 2: 5.0 is not 0 or 1", "'labels.like'"]),
    (lambda m: m.update(dense=[{"column": "price", "name": "country"}]),
     ["key 'dense[0]'", "output name 'country' is already used by key 'categorical[0]'"]),
    (lambda m: m["side_tables"][0].update(key="itemid"),
     ["key 'side_tables[0].key'", "column 'itemid' is not in side table", "items.csv"]),
    (lambda m: m["side_tables"][0].update(path="nope.csv"), ["nope.csv: side table not found"]),
    (lambda m: m["labels"]["like"].update(op="=>"), ["key 'labels.like.op'", "'=>'"]),
    (lambda m: m.pop("user"), ["key 'history'", "needs 'user'"]),
    (lambda m: m.update(days={"calendar": "Mars/Olympus"}), ["key 'days.calendar'"]),
    (lambda m: m.update(days={"calendar": "UTC", "buckets": 3}), ["key 'days'", "exactly one"]),
    (lambda m: m["history"].update(fields={"item": "item"}), ["history.fields.item", "_id"]),
    (lambda m: m["history"].update(fields={"x": {"feature": "colour"}}),
     ["history.fields.x", "unknown categorical feature 'colour'"]),
    (lambda m: m.update(time={"column": "event_time", "unit": "iso"}),
     [f"column 'event_time' line 2: {T0 + 500} is not an ISO datetime"]),
]


@pytest.mark.parametrize("change,words", BAD)
def test_bad_mapping(tmp_path, capsys, change, words):
    m = copy.deepcopy(MAPPING)
    change(m)
    src, mapping = setup(tmp_path, m)
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    for w in words:
        assert w in err
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_duplicate_side_key_and_negative_id(tmp_path, capsys):
    src, mapping = setup(tmp_path)
    pd.concat([ITEMS, ITEMS.iloc[[1]]]).to_csv(src / "items.csv", index=False)
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(out)]) == 2
    assert "items.csv: column 'item_id' line 6: key 11 repeats" in capsys.readouterr().err
    ITEMS.to_csv(src / "items.csv", index=False)
    LOG.assign(user=[1, 1, 2, -1, 2, 1, 2, 3]).to_csv(src / "log.csv", index=False)
    raw = copy.deepcopy(MAPPING)
    raw["user"] = {"column": "user", "ids": "raw"}  # kept as read: integers >= 0
    mapping.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(out)]) == 2
    assert "log.csv: column 'user' line 5: negative id -1" in capsys.readouterr().err
    assert not out.exists()


def test_docs_example(tmp_path, capsys):
    """docs/guides/your_data.md's worked example runs as written."""
    example = ROOT / "docs" / "examples" / "my_logs"
    out = tmp_path / "news"
    schema, t = run(capsys, example, example / "mapping.yaml", out)
    assert schema.n_rows == 36 and schema.days == [0, 1, 2]
    assert schema.domains == ["feed", "search", "other"]
    assert [f.name for f in schema.sequence] == ["hist_item_id", "hist_click", "hist_surface",
                                                 "hist_topic", "hist_age"]
    assert (t.loc[t["item_id"] == 7, "topic"] == 0).all()  # article 7 has no row in items.csv
    assert main(["data", "validate", str(out)]) == 0
    said = capsys.readouterr().out
    assert "ok: 36 rows" in said
    files = sorted(p.stem for p in (out / "vocab").glob("*.parquet"))
    assert files  # raw user, item and side-table ids: each kept with its codes
    assert f"; {len(files)} id vocabulary files match theirs" in said


def test_one_table_in_two_formats_is_refused(tmp_path, capsys):
    """The default patterns match both log.csv and log.parquet: every row would be read
    twice. One error naming both; either one alone, or a pattern choosing one, imports."""
    src, mapping = setup(tmp_path)
    LOG.to_parquet(src / "log.parquet", index=False)
    out = tmp_path / "out"
    argv = ["data", "import", "--src", str(src), "--mapping", str(mapping), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {src}: both log.csv and log.parquet match the log patterns "
                          "(*.csv, *.parquet)") and err.count("\n") == 1
    assert "keep one, or give the mapping a files: pattern that matches only one" in err
    assert not out.exists()

    _, both_ok = run(capsys, src, _with_files(tmp_path, ["*.parquet"]), tmp_path / "pq")
    (src / "log.csv").unlink()
    _, parquet_only = run(capsys, src, mapping, tmp_path / "parquet_only")
    pd.testing.assert_frame_equal(both_ok, parquet_only)
    (src / "log.parquet").unlink()
    LOG.to_csv(src / "log.csv", index=False)
    _, csv_only = run(capsys, src, mapping, tmp_path / "csv_only")
    pd.testing.assert_frame_equal(csv_only, parquet_only)
    assert len(csv_only) == len(LOG)  # each row once


def _with_files(tmp_path: Path, files: list[str]) -> Path:
    path = tmp_path / "map_files.yaml"
    path.write_text(yaml.safe_dump({**MAPPING, "files": files}, sort_keys=False))
    return path


def test_same_name_in_two_folders_is_two_tables(tmp_path):
    """Only one folder's a.csv and a.csv.gz/a.parquet are one table; day1/a.csv and
    day2/a.csv are two."""
    from gemkd.transfer.data.importer.source import find_files
    from gemkd.transfer.errors import DataError

    for day in ("day1", "day2"):
        (tmp_path / day).mkdir()
        LOG.to_csv(tmp_path / day / "a.csv", index=False)
    assert find_files(tmp_path, ("*/*.csv",), set()) == [tmp_path / "day1" / "a.csv",
                                                         tmp_path / "day2" / "a.csv"]
    LOG.to_csv(tmp_path / "day2" / "a.csv.gz", index=False)
    with pytest.raises(DataError, match="both day2/a.csv and day2/a.csv.gz match"):
        find_files(tmp_path, ("*/*.csv", "*/*.csv.gz"), set())


def test_a_domain_named_all_beside_others_is_refused_until_prefixed(tmp_path, capsys):
    """'all' is every metric's all-domains row: a log whose domain column holds the value 'all'
    beside other values (a campaign 'all' next to 'men' and 'women') made a dataset that every
    run then refused; the import says so, naming the fix, and the prefixed mapping imports."""
    log = LOG.assign(surface=LOG["surface"].replace({"feed": "all"}))
    src, mapping = setup(tmp_path, MAPPING, log)
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {mapping}: key 'domain' (column 'surface')") and "\n" not in err
    assert "['all', 'other']" in err and "'domain.prefix'" in err and "['d_all', 'other']" in err
    assert not out.exists()
    prefixed = copy.deepcopy(MAPPING)
    prefixed["domain"]["prefix"] = "d_"
    src, mapping = setup(tmp_path, prefixed, log)
    schema, _ = run(capsys, src, mapping, out)
    assert schema.domains == ["d_all", "other"]


def test_a_single_domain_named_all_is_kept(tmp_path, capsys):
    """One domain whose value is 'all' is the all-domains row itself: not refused."""
    src, mapping = setup(tmp_path, MAPPING, LOG.assign(surface="all"))
    schema, _ = run(capsys, src, mapping, tmp_path / "out")
    assert schema.domains == ["all"]

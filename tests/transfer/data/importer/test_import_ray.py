"""``gemkd data import --engine ray`` (importer/stream_ray.py) on a local Ray instance writes the
very dataset of the one-machine streaming import, every file byte for byte, for mappings that
cover the importer's features; its errors are the one-machine import's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gemkd.transfer.data.importer import import_logs, load_mapping, stream_ray
from gemkd.transfer.data.kuairand import kuairand_mapping
from gemkd.transfer.errors import ConfigError, DataError
from gemkd.transfer.ray_cluster import kept_handlers
from tests.conftest import KUAIRAND_MAPPING, ROOT
from tests.transfer.data import test_kuairand
from tests.transfer.data.importer import test_import, test_import_days
from tests.transfer.data.importer.test_import_stream import (
    MANY,
    T0,
    assert_same_bytes,
    many_log,
    mapping_file,
)


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance (1 CPU) for the module; Ray's SIGTERM handler does not leak."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'gemkd[ray]')")
    try:
        with kept_handlers():
            ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
                     log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - any failure to start is a reason to skip
        pytest.skip(f"a local Ray instance could not start: {type(e).__name__}: {e}")
    yield ray
    ray.shutdown()


def both(tmp_path: Path, src: Path, mapping, notes: list[str] | None = None,
         batch_rows: int = 3) -> tuple[Path, Path]:
    """The dataset streamed here and on Ray, ``batch_rows`` rows at a time."""
    a, b = tmp_path / "local", tmp_path / "ray"
    one = import_logs(src, mapping, a, notes=notes, batch_rows=batch_rows)
    two = import_logs(src, mapping, b, notes=notes, batch_rows=batch_rows, engine="ray")
    assert one.notes == two.notes
    assert one.schema.rows_per_day == two.schema.rows_per_day
    assert not (b / ".spill").exists()
    return a, b


def test_side_tables_labels_buckets_history_fields(tmp_path, ray_local, monkeypatch):
    """Histories in 5 user shards: 3 users, so shards without a row on a date."""
    monkeypatch.setattr(stream_ray, "HISTORY_SHARDS", 5)
    src, path = test_import.setup(tmp_path)
    assert test_import.LOG["user"].nunique() == 3
    assert_same_bytes(*both(tmp_path, src, load_mapping(path)))


def test_docs_example_split_and_log2(tmp_path, ray_local):
    example = ROOT / "docs" / "examples" / "my_logs"
    assert_same_bytes(*both(tmp_path, example, load_mapping(example / "mapping.yaml"),
                            batch_rows=5))


def test_kuairand_levels_date_column_and_optional_sides(tmp_path, ray_local):
    src = tmp_path / "src"
    test_kuairand.write_log(src)
    test_kuairand.write_features(src)
    m, notes = kuairand_mapping(src, load_mapping(KUAIRAND_MAPPING), None, 0.01, 1024)
    assert_same_bytes(*both(tmp_path, src, m, notes, batch_rows=4))


def test_a_date_range_and_stragglers(tmp_path, ray_local, monkeypatch):
    """Histories in 7 user shards."""
    monkeypatch.setattr(stream_ray, "HISTORY_SHARDS", 7)
    src = tmp_path / "src"
    src.mkdir()
    test_import_days.stragglers().to_csv(src / "log.csv", index=False)
    m = {**test_import_days.MAPPING,
         "days": {"calendar": "UTC", "from": "2024-06-01", "to": "2024-06-08"},
         "history": {"max_events": 4, "fields": {"item_id": "item", "click": {"label": "click"},
                                                 "age": "age"}}}
    assert_same_bytes(*both(tmp_path, src, load_mapping(mapping_file(tmp_path, m)),
                            batch_rows=500))


def many_files(tmp_path: Path) -> Path:
    """:func:`many_log` in three files (CSV and Parquet): ties between files keep file order,
    histories reach across dates and files."""
    log = many_log()
    src = tmp_path / "src"
    src.mkdir()
    log.iloc[:2000].to_csv(src / "a.csv", index=False)
    log.iloc[2000:3500].to_parquet(src / "b.parquet", index=False)
    log.iloc[3500:].to_csv(src / "c.csv", index=False)
    return src


@pytest.mark.parametrize(("days", "shards"), [({"calendar": "UTC"}, 1),
                                              ({"calendar": "UTC"}, 3), ({"buckets": 5}, 2)],
                         ids=["calendar", "calendar-3-shards", "buckets-2-shards"])
def test_many_files_and_dates_carry_histories(tmp_path, ray_local, monkeypatch, days, shards):
    """Calendar days, and equal-count buckets (a day spanning dates, a date spanning days:
    one write task for the dates that share days); histories in 1 to 3 user shards."""
    monkeypatch.setattr(stream_ray, "HISTORY_SHARDS", shards)
    src = many_files(tmp_path)
    m = {**MANY, "days": days, "item": {"column": "item", "ids": "hash", "buckets": 50}}
    assert_same_bytes(*both(tmp_path, src, load_mapping(mapping_file(tmp_path, m)),
                            batch_rows=777))


def test_an_error_names_the_files_own_row_and_leaves_nothing(tmp_path, ray_local):
    src, path = test_import.setup(tmp_path)
    bad = test_import.LOG.assign(clicked=[1, 0, 1, 0, 1, 2, 0, 1])
    bad.to_csv(src / "log.csv", index=False)
    with pytest.raises(DataError, match=r"log.csv: column 'clicked' line 7: 2 is not 0 or 1"):
        import_logs(src, load_mapping(path), tmp_path / "out", batch_rows=2, engine="ray")
    assert not (tmp_path / "out").exists()


def test_the_command_takes_engine_ray(tmp_path, ray_local, capsys):
    from gemkd.experiments.cli import main

    src, path = test_import.setup(tmp_path)
    import_logs(src, load_mapping(path), tmp_path / "local")
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(tmp_path / "ray"), "--engine", "ray"]) == 0
    assert "wrote 8 examples" in capsys.readouterr().out
    assert_same_bytes(tmp_path / "local", tmp_path / "ray")


def test_without_ray_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    src, path = test_import.setup(tmp_path)
    with pytest.raises(ConfigError, match=r"--engine ray needs Ray: pip install 'gemkd\[ray\]'"):
        import_logs(src, load_mapping(path), tmp_path / "out", engine="ray")
    assert not (tmp_path / "out").exists()


def test_engine_ray_is_for_the_streaming_import(tmp_path):
    src, path = test_import.setup(tmp_path)
    with pytest.raises(ConfigError, match="engine 'ray' runs the streaming import, but the "
                                          "import is in memory"):
        import_logs(src, load_mapping(path), tmp_path / "out", streaming=False, engine="ray")
    with pytest.raises(ConfigError, match=r"engine: expected one of \['local', 'ray'\], got "
                                          "'spark'"):
        import_logs(src, load_mapping(path), tmp_path / "out", engine="spark")
    assert not (tmp_path / "out").exists()


def parquet_in_row_groups(tmp_path: Path, rows_per_group: int) -> Path:
    """The many-files log as one Parquet file of row groups of ``rows_per_group`` rows."""
    src = many_files(tmp_path)
    log = pd.concat([pd.read_csv(src / "a.csv"), pd.read_parquet(src / "b.parquet"),
                     pd.read_csv(src / "c.csv")], ignore_index=True)
    for f in list(src.iterdir()):
        f.unlink()
    log.to_parquet(src / "log.parquet", index=False, row_group_size=rows_per_group)
    return src


def test_a_parquet_files_row_groups_are_scanned_by_several_tasks(tmp_path, ray_local):
    """5,000 rows in row groups of 300, batches of 100: runs of 4 row groups per scan task."""
    src = parquet_in_row_groups(tmp_path, 300)
    splits = stream_ray._splits(src / "log.parquet", stream_ray.SPLIT_BATCHES * 100)
    assert [s.row_groups for s in splits][:2] == [[0, 1], [2, 3]]
    assert [s.first for s in splits][:3] == [0, 600, 1200] and len(splits) == 9
    m = {**MANY, "days": {"calendar": "UTC"}}
    assert_same_bytes(*both(tmp_path, src, load_mapping(mapping_file(tmp_path, m)),
                            batch_rows=100))


def test_an_error_in_a_later_row_group_names_the_files_row(tmp_path, ray_local):
    src = parquet_in_row_groups(tmp_path, 300)
    log = pd.read_parquet(src / "log.parquet")
    log.loc[4321, "click"] = 3
    log.loc[4900, "click"] = 5  # a later error: the first one in file order is raised
    log.to_parquet(src / "log.parquet", index=False, row_group_size=300)
    m = load_mapping(mapping_file(tmp_path, {**MANY, "days": {"calendar": "UTC"}}))
    with pytest.raises(DataError, match=r"log.parquet: column 'click' row 4321: 3 is not 0 or 1"):
        import_logs(src, m, tmp_path / "local", batch_rows=100)
    with pytest.raises(DataError, match=r"log.parquet: column 'click' row 4321: 3 is not 0 or 1"):
        import_logs(src, m, tmp_path / "ray", batch_rows=100, engine="ray")
    assert not (tmp_path / "ray").exists()


def test_days_of_several_row_groups_and_part_files(tmp_path, ray_local, monkeypatch):
    """40,000 rows over 2 days: each day 20,000 rows, two row groups of the writer's 16,384,
    and with ``part_rows`` of one row group two part files; histories in 4 user shards."""
    monkeypatch.setattr(stream_ray, "HISTORY_SHARDS", 4)
    rng = np.random.default_rng(5)
    n = 40_000
    log = pd.DataFrame({"t": T0 + rng.integers(0, 2 * 86_400, n),
                        "user": rng.integers(0, 500, n), "item": rng.integers(0, 900, n),
                        "click": rng.integers(0, 2, n)})
    src = tmp_path / "src"
    src.mkdir()
    log.iloc[:25_000].to_csv(src / "a.csv", index=False)
    log.iloc[25_000:].to_csv(src / "b.csv", index=False)
    m = load_mapping(mapping_file(tmp_path, {
        "time": "t", "days": {"calendar": "UTC"}, "user": "user", "item": "item",
        "labels": {"click": "click"},
        "history": {"max_events": 20, "fields": {"item_id": "item", "age": "age"}}}))
    a, b = tmp_path / "local", tmp_path / "ray"
    import_logs(src, m, a, batch_rows=8192, part_rows=16_384)
    import_logs(src, m, b, batch_rows=8192, part_rows=16_384, engine="ray")
    assert sorted(p.name for p in (b / "day=1").iterdir()) == ["part-0.parquet",
                                                                "part-1.parquet"]
    assert_same_bytes(a, b)


def test_a_shards_histories_keep_only_the_events_a_row_reads():
    """Carried events of users absent that date are not saved for the writer; the ranges are
    renumbered to the events kept."""
    from gemkd.transfer.data.importer.stream_ray_hist import _used

    t = np.arange(10) * 100
    start, end = np.array([2, 2, 7, 9]), np.array([2, 4, 9, 9])  # an empty range, ...
    s, e, kept, vals = _used(start, end, t, {"item": t + 1})
    assert kept.tolist() == [200, 300, 700, 800] and vals["item"].tolist() == [201, 301, 701,
                                                                              801]
    assert s.tolist() == [0, 0, 2, 4] and e.tolist() == [0, 2, 4, 4]


def test_a_node_without_the_output_folder_refuses(tmp_path):
    """A task on a node that does not see ``--out``'s staging folder fails, naming it, rather
    than spill where no other node reads."""
    src, path = test_import.setup(tmp_path)
    split = stream_ray._Split(src / "log.csv")
    with pytest.raises(ConfigError, match=r"nowhere/\.out: the output's staging folder is not "
                                          "on Ray node .*: --out must be on storage every node"):
        stream_ray._scan_split(0, split, load_mapping(path), tmp_path / "nowhere" / ".out" /
                               ".spill", lambda *a: {}, lambda p: [], 10)
    assert not (tmp_path / "nowhere").exists()


def test_a_cluster_that_does_not_answer_a_clear_error(tmp_path, monkeypatch):
    """Ray's ConnectionError (a cluster down, a missing token) becomes one line naming
    RAY_ADDRESS; nothing is written."""
    import types

    def init(**kwargs):
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.9:6379\nmore")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    src, path = test_import.setup(tmp_path)
    with pytest.raises(ConfigError, match=r"--engine ray: could not connect to the Ray cluster "
                                          r"at RAY_ADDRESS=10.0.0.9:6379 \(Failed to connect to "
                                          r"Ray cluster at 10.0.0.9:6379\); is it up"):
        import_logs(src, load_mapping(path), tmp_path / "out", engine="ray")
    assert not (tmp_path / "out").exists()


def test_a_task_run_again_finds_its_inputs_and_writes_the_same_files(tmp_path):
    """Ray reruns a task whose worker died: scan, encode and history tasks leave their inputs
    in place and write the same bytes the second time (run here in this process, no Ray)."""
    import functools

    from gemkd.transfer.data.importer import build, sides, stream, stream_ray_hist

    src, path = test_import.setup(tmp_path)
    m = load_mapping(path)
    spill = tmp_path / "staging" / ".spill"
    spill.parent.mkdir()
    check = functools.partial(build._check_header, m=m)
    split = stream_ray._Split(src / "log.csv")
    scan = stream_ray._scan_split(0, split, m, spill, build._extract, check, 3)
    chunks = {p: p.read_bytes() for p in spill.rglob("*.pkl")}
    assert stream_ray._scan_split(0, split, m, spill, build._extract, check, 3).dates == \
        scan.dates
    assert {p: p.read_bytes() for p in spill.rglob("*.pkl")} == chunks
    plan = stream._Plan.of(scan, m, sides.resolve(m, src, []), [])
    date = min(scan.dates)
    assert m.history is not None
    names = [f"hist_{f.name}" for f in m.history.fields if f.kind != "age"]

    def encode_and_join() -> tuple[tuple, dict[Path, bytes]]:
        got = stream_ray._encode_date(date, 0, plan, m, spill, 2)
        for shard in range(2):
            stream_ray_hist.join_shard(None, spill, date, shard, names, m.history.max_events)
        return got, {p: p.read_bytes() for p in spill.rglob("*.pkl")}

    once = encode_and_join()
    assert len([p for p in once[1] if "hist" in p.parts]) == 2
    assert encode_and_join() == once

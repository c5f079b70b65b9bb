"""The synthetic world generated a day at a time: the users' carried events give the histories a
whole-timeline sort gives, and a day split into part files holds the same rows."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gemkd.transfer.data.dataset_writer import ROW_GROUP_SIZE, day_paths, read_day
from gemkd.transfer.data.synth import generate
from gemkd.transfer.data.synth.timeline import Timeline
from tests.conftest import tiny_config

# tiny.yaml with 3 days of 40,000 rows (3 row groups a day) and histories cut at 64 events, so
# the carried events are trimmed every day. The digest of every day's columns (values, list
# offsets and types) was recorded with the generator before it streamed (main 5bf505f, which
# kept the whole timeline and re-sorted it every day): the streamed world must stay equal.
STREAM_WORLD = {"n_days": 3, "examples_per_day": 40_000, "max_history": 64}
RECORDED = "fb8eef4e22eb4220dd5f03ff1c6a94c04382125e83f5d756763b8efd511786f7"


def _content_digest(root: Path, days: range) -> str:
    h = hashlib.sha256()
    for day in days:
        table = read_day(root, day)
        for name in table.column_names:
            col = table.column(name).combine_chunks()
            h.update(f"{name}:{col.type}".encode())
            if pa.types.is_list(col.type):
                offsets = col.offsets.to_numpy()
                h.update((offsets - offsets[0]).astype(np.int64).tobytes())
                h.update(col.flatten().to_numpy().tobytes())
            else:
                h.update(col.to_numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def one_part(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stream") / "one_part"
    generate(tiny_config(**STREAM_WORLD), out)
    return out


def test_streamed_world_equals_the_recorded_whole_timeline_world(one_part):
    assert _content_digest(one_part, range(STREAM_WORLD["n_days"])) == RECORDED


def test_part_files_hold_the_day_in_order(tmp_path, one_part):
    parts = tmp_path / "parts"
    generate(tiny_config(**STREAM_WORLD), parts, part_rows=ROW_GROUP_SIZE)
    # the same schema.json but for the digests of its part files, which are other files
    split, whole = (json.loads((d / "schema.json").read_text()) for d in (parts, one_part))
    assert sorted(split.pop("part_sha256")) == [
        f"day={d}/part-{k}.parquet" for d in range(STREAM_WORLD["n_days"]) for k in range(3)]
    assert sorted(whole.pop("part_sha256")) == [
        f"day={d}/part-0.parquet" for d in range(STREAM_WORLD["n_days"])]
    assert split == whole
    for day in range(STREAM_WORLD["n_days"]):
        assert [Path(p).name for p in day_paths(parts, day)] == [
            "part-0.parquet", "part-1.parquet", "part-2.parquet"]
        assert [pq.ParquetFile(p).metadata.num_rows for p in day_paths(parts, day)] == [
            ROW_GROUP_SIZE, ROW_GROUP_SIZE, 40_000 - 2 * ROW_GROUP_SIZE]
        assert [Path(p).name for p in day_paths(one_part, day)] == ["part-0.parquet"]
        assert pq.ParquetFile(day_paths(one_part, day)[0]).metadata.num_row_groups == 3
        assert read_day(parts, day).equals(read_day(one_part, day))


def test_part_rows_must_be_whole_row_groups(tmp_path):
    with pytest.raises(ValueError, match="part_rows must be a positive multiple of 16384"):
        generate(tiny_config(n_days=1), tmp_path / "out", part_rows=1000)
    assert not (tmp_path / "out").exists()


def _sorted_timeline(events: list[tuple[np.ndarray, ...]]) -> Timeline:
    """Every event in one stable sort by (user, time): the generator's timeline before it
    streamed."""
    users, t, item, cat, act = (np.concatenate(c) for c in zip(*events, strict=True))
    key = (users.astype(np.int64) << 32) | t
    order = np.argsort(key, kind="stable")
    return Timeline(key[order], item[order], cat[order].astype(np.int32),
                    act[order].astype(np.int32))


def _events(rng: np.random.Generator, n: int, users: int, t0: int, t1: int,
            item0: int) -> tuple[np.ndarray, ...]:
    # few users and a coarse clock: many events share a (user, time)
    return (rng.integers(0, users, n), rng.integers(t0, t1, n) // 7 * 7,
            np.arange(item0, item0 + n), rng.integers(0, 5, n), rng.integers(0, 4, n))


def test_carried_events_give_the_histories_of_the_whole_sorted_timeline():
    rng = np.random.default_rng(3)
    max_history, day = 6, 1_000
    carried, every = Timeline.empty(), []
    for d in range(4):
        background = _events(rng, 300, 9, d * day, (d + 1) * day, 10_000 * d)
        carried.add(*background)
        every.append(background)
        users, t = rng.integers(0, 10, 200), np.sort(rng.integers(d * day, (d + 1) * day, 200))
        got_offsets, got = carried.histories(users, t, max_history)
        want_offsets, want = _sorted_timeline(every).histories(users, t, max_history)
        assert np.array_equal(got_offsets, want_offsets)
        assert got_offsets[-1] > 0
        for name in want:
            assert np.array_equal(got[name], want[name]), name
        # the day's clicks land at times its background events also have: they go after them
        clicks = _events(rng, 50, 9, d * day, (d + 1) * day, 10_000 * d + 5_000)
        carried.add(*clicks)
        every.append(clicks)
        carried.keep_last(max_history)
        assert np.bincount(carried.key >> 32).max() == max_history

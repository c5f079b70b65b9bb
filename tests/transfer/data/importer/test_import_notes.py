"""The import's notes on the log as a whole (``importer/log_checks.py``): repeated rows, one
user holding most rows, thin calendar days, and the dates of time buckets; the same from the
streaming and the in-memory import, and ``data summary`` bounded on a log of thousands of
days."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.thin_log import MAPPING as THIN_MAPPING
from benchmarks.thin_log import thin_frame
from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_summary import summarize
from gemkd.transfer.data.importer import import_logs, parse_mapping

T0 = 1_700_000_000
MAPPING = {"time": {"column": "t", "unit": "s"}, "user": "user", "item": "item",
           "labels": {"click": "clicked"}}
MODES = pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in_memory"])


def _frame(n: int, users: np.ndarray | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"t": T0 + np.sort(rng.integers(0, 4 * 86_400, n)),
                         "user": rng.integers(0, 300, n) if users is None else users,
                         "item": rng.integers(0, 50, n), "clicked": rng.integers(0, 2, n)})


def _notes(tmp_path: Path, frame: pd.DataFrame, streaming: bool, mapping: dict = MAPPING,
           **kw) -> list[str]:
    src = tmp_path / "log.csv"
    frame.to_csv(src, index=False)
    out = tmp_path / f"out_{streaming}"
    return import_logs(src, parse_mapping(mapping), out, streaming=streaming, overwrite=True,
                       **kw).notes


@MODES
def test_repeated_rows_are_counted_in_a_note(tmp_path, streaming):
    frame = _frame(2_000)
    twice = pd.concat([frame, frame.iloc[::4]]).sort_values("t", kind="stable")
    notes = _notes(tmp_path, twice, streaming, batch_rows=700)  # copies across batches
    dup = [n for n in notes if n.startswith("rows:")]
    assert dup == ["rows: 500 of 2,500 rows (20.00 %) repeat an earlier row in every column "
                   "the mapping reads (same time, ids, labels and features): an export that "
                   "wrote rows twice? They are kept, each an example and a history event; drop "
                   "the copies before import if they are not real repeats"], notes
    assert not [n for n in _notes(tmp_path, frame, streaming) if n.startswith("rows:")]


@MODES
def test_one_user_with_most_rows_is_noted(tmp_path, streaming):
    users = np.where(np.arange(2_000) < 1_990, 42, np.arange(2_000))
    notes = _notes(tmp_path, _frame(2_000, users), streaming)
    assert [n for n in notes if n.startswith("users:")] == [
        "users: user 42 holds 1,990 of the 2,000 rows (99.5 %): a bot, a shared or placeholder "
        "id (0, -1, 'unknown')? Their rows dominate the training and every metric; drop or "
        "split them before import if they are not one person"]
    assert not [n for n in _notes(tmp_path, _frame(2_000), streaming) if n.startswith("users")]


def test_streaming_and_in_memory_write_the_same_notes(tmp_path):
    users = np.where(np.arange(3_000) < 2_000, 7, np.arange(3_000))
    frame = _frame(3_000, users)
    frame = pd.concat([frame, frame.iloc[:40]]).sort_values("t", kind="stable")
    assert _notes(tmp_path, frame, True, batch_rows=1_000) == _notes(tmp_path, frame, False)


@MODES
def test_thin_days_are_one_note_with_numbers_and_what_to_use(tmp_path, streaming):
    frame = thin_frame(rows=4_000, users=3_200, items=300, years=3.0)
    notes = _notes(tmp_path, frame, streaming, THIN_MAPPING, batch_rows=1_500)
    days = [n for n in notes if n.startswith("days:")]
    assert len(days) == 1, days  # no line per gap or straggler day
    local = frame["time"] // 86_400
    per_day = local.value_counts()
    span = int(local.max() - local.min()) + 1
    gaps = int((np.diff(np.sort(per_day.index.to_numpy())) > 1).sum())
    one = (frame["user"].value_counts() == 1).mean()
    m = re.fullmatch(r"days: thin calendar days: 4,000 rows on ([\d,]+) days of ([\d,]+) "
                     r"\((\S+) to (\S+)\), a median of (\S+) rows a day \((\d+) % of days hold "
                     r"under 5\), ([\d,]+) days with none in ([\d,]+) gaps; (\d+) % of users "
                     r"have a single event\. .*give the mapping `days: \{buckets: 14\}` \(14 "
                     r"time buckets of ~285 rows, no gaps\), or keep a dense stretch with "
                     r"`days: \{from: DATE, to: DATE\}` \(the busiest 14 days, (\S+) to (\S+), "
                     r"hold ([\d,]+) rows\)", days[0])
    assert m, days[0]
    assert int(m[1].replace(",", "")) == len(per_day)
    assert int(m[2].replace(",", "")) == span
    assert float(m[5]) == per_day.median()
    assert int(m[6]) == round(100 * (per_day < 5).mean())
    assert int(m[7].replace(",", "")) == span - len(per_day)
    assert int(m[8].replace(",", "")) == gaps
    assert int(m[9]) == round(100 * one)
    start = np.datetime64(m[10], "D").astype(np.int64)
    assert int(m[12].replace(",", "")) == int(per_day[(per_day.index >= start)
                                                      & (per_day.index < start + 14)].sum())


@MODES
def test_buckets_record_their_dates_and_summary_shows_them(tmp_path, streaming):
    frame = thin_frame(rows=3_000, users=2_000, items=200, years=2.0)
    mapping = {**THIN_MAPPING, "days": {"buckets": 4}}
    _notes(tmp_path, frame, streaming, mapping, batch_rows=1_000)
    root = tmp_path / f"out_{streaming}"
    schema = json.loads((root / "schema.json").read_text())
    spans = schema["generator"]["day_dates"]
    assert schema["generator"]["mapping"]["days"] == {"buckets": 4}
    from gemkd.transfer.data.dataset_writer import read_day

    for day in range(4):
        group = read_day(root, day, ["ts"]).to_pandas()
        first, last = (str(np.datetime64(int(v), "s").astype("datetime64[D]"))
                       for v in (group["ts"].min(), group["ts"].max()))
        assert spans[str(day)] == [first, last]
    summary = summarize(root)
    assert summary["dates"].tolist()[:-1] == [f"{a} to {b}" for a, b in
                                              (spans[str(d)] for d in range(4))]


def test_summary_of_thousands_of_days_is_bounded(tmp_path, capsys):
    frame = thin_frame(rows=3_000, users=2_400, items=200, years=2.0)
    src = tmp_path / "log.csv"
    frame.to_csv(src, index=False)
    import_logs(src, parse_mapping(THIN_MAPPING), tmp_path / "ds")
    days = frame["time"] // 86_400
    n_days = days.nunique()
    capsys.readouterr()
    assert main(["data", "summary", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 80
    assert f"... {n_days - 40:,} of {n_days:,} days not shown" in out
    assert "note: days: thin calendar days: 3,000 rows" in out
    assert main(["data", "summary", str(tmp_path / "ds"), "--all-days"]) == 0
    out = capsys.readouterr().out
    assert "not shown" not in out and len(out.splitlines()) > n_days


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_ray_writes_the_notes_and_bucket_dates_of_the_local_import(tmp_path):
    pytest.importorskip("ray")
    users = np.where(np.arange(3_000) < 2_000, 7, np.arange(3_000))
    frame = _frame(3_000, users)
    frame = pd.concat([frame, frame.iloc[:40]]).sort_values("t", kind="stable")
    src = tmp_path / "log.csv"
    frame.to_csv(src, index=False)
    m = parse_mapping({**MAPPING, "days": {"buckets": 3}})
    local = import_logs(src, m, tmp_path / "local", batch_rows=1_000)
    ray = import_logs(src, m, tmp_path / "ray", batch_rows=1_000, engine="ray")
    assert ray.notes == local.notes and any(n.startswith("rows: 40 of") for n in ray.notes)
    assert (tmp_path / "ray" / "schema.json").read_bytes() == \
        (tmp_path / "local" / "schema.json").read_bytes()


@MODES
def test_a_bucketed_thin_log_notes_its_one_event_users(tmp_path, streaming):
    """The thin-days note's advice (buckets) keeps its word on single-event users: a bucketed
    import notes them with the share, and stores the note with the dataset."""
    frame = thin_frame(rows=3_000, users=2_400, items=200, years=2.0)
    notes = _notes(tmp_path, frame, streaming, {**THIN_MAPPING, "days": {"buckets": 4}},
                   batch_rows=1_000)
    per_user = frame["user"].value_counts()
    share = round(100 * float((per_user == 1).mean()))
    assert share >= 50
    users = [n for n in notes if n.startswith("users:")]
    assert users == [f"users: {share} % of the {len(per_user):,} users have a single event (a "
                     f"median of {float(per_user.median()):g} per user): their rows have no "
                     "history and ids seen once, so what any model learns of them comes from "
                     "the items; a method built on histories or user embeddings has little to "
                     "work with on this log"], notes
    stored = json.loads((tmp_path / f"out_{streaming}" / "schema.json").read_text())
    assert users[0] in stored["generator"]["notes"]
    # a log of returning users has no such note
    assert not [n for n in _notes(tmp_path, _frame(2_000), streaming,
                                  {**MAPPING, "days": {"buckets": 3}})
                if n.startswith("users:")]


def test_a_note_is_printed_once(tmp_path, capsys):
    """The CLI prints each note as ``note:``; the importer logs it only at INFO (``-v``)."""
    frame = thin_frame(rows=3_000, users=2_400, items=200, years=2.0)
    src = tmp_path / "log.csv"
    frame.to_csv(src, index=False)
    (tmp_path / "map.yaml").write_text(json.dumps(THIN_MAPPING))
    assert main(["data", "import", "--src", str(src), "--mapping", str(tmp_path / "map.yaml"),
                 "--out", str(tmp_path / "ds")]) == 0
    captured = capsys.readouterr()
    both = captured.out + captured.err
    assert both.count("thin calendar days") == 1, both
    assert "note: days: thin calendar days" in captured.out

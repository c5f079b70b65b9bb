"""Trap (h) of the first real log: the import said nothing about straggler days (a handful of rows
where other days have thousands: the edges of an export) nor about a gap of days with no rows;
both now come as notes on stdout and warnings on stderr."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.schema import DatasetSchema
from tests.conftest import dataset_table

DAY = 86_400
T0 = 1_717_200_000 - 1_717_200_000 % DAY  # 2024-06-01 00:00 UTC
MAPPING = {"source": "clicks", "time": {"column": "t", "unit": "s"}, "days": {"calendar": "UTC"},
           "user": "user", "item": "item", "labels": {"click": "click"}}


def log(rows_per_day: dict[int, int], seed: int = 0) -> pd.DataFrame:
    """``rows_per_day`` rows on each day (days after 2024-06-01), at random times in the day."""
    rng = np.random.default_rng(seed)
    t = np.concatenate([T0 + d * DAY + rng.integers(0, DAY, n) for d, n in rows_per_day.items()])
    return pd.DataFrame({"t": t, "user": rng.integers(0, 50, len(t)),
                         "item": rng.integers(0, 30, len(t)), "click": rng.integers(0, 2, len(t))})


def run_import(tmp_path: Path, capsys, frame: pd.DataFrame, mapping: dict = MAPPING
               ) -> tuple[str, str]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    frame.to_csv(src / "log.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(mapping))
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(tmp_path / "out"), "--overwrite"]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_straggler_days_and_a_gap_are_noted_and_warned(tmp_path, capsys):
    """Days 0 and 13 hold 6 and 24 rows against 1,000 on every other day; days 4-11 have none."""
    days = {0: 6, 1: 1000, 2: 1000, 3: 1000, 12: 1000, 13: 24}
    out, err = run_import(tmp_path, capsys, log(days))
    straggler = ("days: days 0 (2024-06-01) and 13 (2024-06-14) have 6 and 24 rows, under 5 % "
                 "of the median day's 1,000")
    gap = "days: no rows on days 4-11 (2024-06-05 to 2024-06-12, 8 days)"
    assert f"note: {straggler}" in out and f"note: {gap}" in out
    assert straggler not in err and gap not in err  # said once, as a note (logged at -v)
    assert "wrote 4030 examples over 6 days" in out


def test_a_one_day_gap_and_one_straggler(tmp_path, capsys):
    out, err = run_import(tmp_path, capsys, log({0: 800, 1: 900, 3: 1000, 4: 30}))
    assert ("note: days: day 4 (2024-06-05) has 30 rows, under 5 % of the median day's 850"
            in out)
    assert "note: days: no rows on day 2 (2024-06-03)" in out
    assert "under 5 %" not in err and "no rows on day 2" not in err


def test_even_days_say_nothing(tmp_path, capsys):
    out, err = run_import(tmp_path, capsys, log({0: 400, 1: 500, 2: 450, 3: 30}))
    assert "days:" not in out and "days:" not in err  # 30 of 425 is 7 %: not a straggler


def test_equal_count_days_are_not_checked(tmp_path, capsys):
    """With ``days: {buckets: N}`` a day is a bucket of equal row count: no straggler, no gap."""
    mapping = {**MAPPING, "days": {"buckets": 4}}
    out, err = run_import(tmp_path, capsys, log({0: 6, 1: 1000, 9: 1000}), mapping)
    assert "days:" not in out and "days:" not in err


def stragglers() -> pd.DataFrame:
    """A new user's log: 35 stray rows months before the log's real 9 days (2024-06-01..09)."""
    rng = np.random.default_rng(1)
    stray = T0 - 75 * DAY + rng.integers(0, 3 * DAY, 35)  # 2024-03-18..20
    real = log({d: 300 for d in range(9)})
    return pd.concat([real, log({0: 35}, seed=2).assign(t=stray)], ignore_index=True)


def test_stray_rows_months_early_push_the_real_days_to_75(tmp_path, capsys):
    out, _ = run_import(tmp_path, capsys, stragglers())
    days = DatasetSchema.load(tmp_path / "out").days
    assert days[-9:] == list(range(75, 84)) and "wrote 2735 examples" in out


def test_a_date_range_keeps_its_days_from_day_0(tmp_path, capsys):
    mapping = {**MAPPING, "days": {"calendar": "UTC", "from": "2024-06-01", "to": "2024-06-09"}}
    out, err = run_import(tmp_path, capsys, stragglers(), mapping)
    schema = DatasetSchema.load(tmp_path / "out")
    assert schema.days == list(range(9)) and schema.n_rows == 2700
    assert ("note: days: kept the 2,700 rows dated 2024-06-01 to 2024-06-09 (UTC); left out 35 "
            "rows before it and 0 after it") in out
    assert "days:" not in err  # no straggler day, no gap
    assert schema.generator["mapping"]["days"] == {"calendar": "UTC", "from": "2024-06-01",
                                                   "to": "2024-06-09"}
    t = dataset_table(tmp_path / "out").to_pandas()
    assert t["ts"].min() >= T0 and (t["day"] == (t["ts"] - T0) // DAY).all()


def test_an_open_range_and_yaml_dates(tmp_path, capsys):
    """``to`` alone keeps day 0 at the first kept date; unquoted YAML dates read as dates."""
    path = tmp_path / "map.yaml"
    frame = log({0: 100, 1: 100, 2: 100, 3: 100})
    mapping = {**MAPPING, "days": {"calendar": "UTC", "to": dt.date(2024, 6, 2)}}
    out, _ = run_import(tmp_path, capsys, frame, mapping)
    assert "left out 0 rows before it and 200 after it" in out
    assert "to: 2024-06-02" in path.read_text()  # written unquoted: YAML reads back a date
    assert DatasetSchema.load(tmp_path / "out").days == [0, 1]


@pytest.mark.parametrize("days,expect", [
    ({"calendar": "UTC", "from": "2024-06-09", "to": "2024-06-01"},
     "key 'days.to': 2024-06-01 is before days.from 2024-06-09"),
    ({"calendar": "UTC", "from": "June 1st"},
     "key 'days.from': expected a date such as 2020-01-09, got 'June 1st'"),
    ({"buckets": 3, "from": "2024-06-01"}, "key 'days.from': only with 'calendar'"),
    ({"calendar": "UTC", "date_column": "d", "from": "2024-06-01"},
     "key 'days.date_column': give 'date_column' or a date range"),
    ({"calendar": "UTC", "from": "2025-01-01"},
     "key 'days': no row of the log is dated 2025-01-01 to the last date (UTC): its rows run "
     "from 2024-06-01 to 2024-06-02"),
])
def test_bad_date_ranges(tmp_path, capsys, days, expect):
    src = tmp_path / "src"
    src.mkdir()
    log({0: 10, 1: 10}).to_csv(src / "log.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump({**MAPPING, "days": days}))
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {expect}" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_summary_gives_each_calendar_day_its_local_date(tmp_path, capsys):
    """`gemkd data summary` shows the date of each day of a log imported with calendar days
    (in the mapping's time zone: a UTC+8 calendar moves an event at 20:00 UTC to the next
    date), and no date column for a world without a calendar."""
    from gemkd.transfer.data.dataset_summary import summarize

    frame = log({0: 50, 1: 60, 3: 70})
    frame["t"] = frame["t"] - frame["t"] % DAY + 20 * 3600  # every event at 20:00 UTC
    run_import(tmp_path, capsys, frame, dict(MAPPING, days={"calendar": "Asia/Shanghai"}))
    table = summarize(tmp_path / "out")
    assert list(table.columns[:3]) == ["day", "date", "examples"]
    assert table["date"].tolist() == ["2024-06-02", "2024-06-03", "2024-06-05", ""]
    assert table["examples"].tolist() == [50, 60, 70, 180]
    assert main(["data", "summary", str(tmp_path / "out")]) == 0
    assert "2024-06-05" in capsys.readouterr().out


def test_a_days_date_is_its_bulk_not_a_stray_row_from_the_evening_before(tmp_path, capsys):
    """`date_column` puts rows stamped the evening before into a day (KuaiRand's 141 rows of
    04-24 in its 04-25): the summary names the day by its bulk's date."""
    from gemkd.transfer.data.dataset_summary import summarize

    frame = log({0: 100, 1: 100})
    frame["date"] = np.where(frame["t"] < T0 + DAY, "2024-06-01", "2024-06-02")
    early = frame.index[:5]  # stamped an hour before midnight, dated the next day
    frame.loc[early, "t"] = T0 - 3600
    frame.loc[early, "date"] = "2024-06-01"
    run_import(tmp_path, capsys, frame, dict(MAPPING, days={"calendar": "UTC",
                                                            "date_column": "date"}))
    table = summarize(tmp_path / "out")
    assert table["date"].tolist()[:2] == ["2024-06-01", "2024-06-02"]


def test_summary_of_a_synthetic_world_has_no_date(tiny_data):
    from gemkd.transfer.data.dataset_summary import summarize

    assert "date" not in summarize(tiny_data).columns

"""``gemkd data import`` refuses implausible times: a wrong ``time.unit`` must not build a
dataset dated 1970 (or the year 55,000) that validates anyway."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.importer.times import likely_unit

T0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC in seconds
DAY = 86_400


def seconds(n: int = 300, span_days: float = 30.0, start: int = T0) -> np.ndarray:
    """``n`` sorted epoch seconds over ``span_days`` days."""
    return start + np.sort(np.random.default_rng(0).integers(0, int(span_days * DAY), n))


def write(tmp_path: Path, t, unit: str | None, parquet: bool = False) -> tuple[Path, Path]:
    log = pd.DataFrame({"t": t, "user": np.arange(len(t)) % 7, "click": np.arange(len(t)) % 2})
    src = tmp_path / ("log.parquet" if parquet else "log.csv")
    if parquet:
        log.to_parquet(src, index=False)
    else:
        log.to_csv(src, index=False)
    time = {"column": "t"} if unit is None else {"column": "t", "unit": unit}
    mapping = tmp_path / "map.yaml"
    mapping.write_text(yaml.safe_dump({"time": time, "user": "user", "labels": {"click": "click"}}))
    return src, mapping


def import_error(capsys, tmp_path: Path, src: Path, mapping: Path) -> str:
    """The one-line error of an import that must fail, having left nothing behind."""
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    return err


WRONG_UNIT = [  # (times, declared unit, words the error must contain)
    # 30 days of seconds declared ms: all on 1970-01-20, 30 days apart in s
    (seconds(), "ms", ["column 't':", "every time in unit 'ms' falls on one UTC day",
                       "line 2: ", "1970-01-20", "in unit 's' they span",
                       "the likely unit is 's'"]),
    # a few hours of seconds declared ms: 1970 and within one day either way
    (seconds(span_days=0.1), "ms", ["column 't' line 2:", "in unit 'ms' is 1970-01-20",
                                    "before 1990-01-01", "the likely unit is 's'"]),
    (seconds(), "ns", ["column 't' line 2:", "in unit 'ns' is 1970-01-01 00:00:01 UTC",
                       "before 1990-01-01", "the likely unit is 's'"]),
    (seconds() * 1000, "s", ["in unit 's' is the year", "after now", "the likely unit is 'ms'"]),
    (seconds() * 1000, "ns", ["in unit 'ns' is 1970-01-01", "the likely unit is 'ms'"]),
    (seconds(start=473_385_600), "s",  # 1985
     ["column 't' line 2:", "is 1985-", "before 1990-01-01",
      "no unit among s, ms, us, ns dates the median value"]),
    (seconds(start=4_102_444_800), None,  # 2100, unit s by default
     ["is 2100-", "after now", "no unit among s, ms, us, ns"]),
]


@pytest.mark.parametrize("t,unit,words", WRONG_UNIT)
def test_wrong_time_unit_is_an_error(tmp_path, capsys, t, unit, words):
    src, mapping = write(tmp_path, t, unit)
    err = import_error(capsys, tmp_path, src, mapping)
    assert f"{src}: column 't'" in err and "(mapping key 'time.unit')" in err
    assert f"in unit {unit or 's'!r}" in err
    for w in words:
        assert w in err, err


def test_the_offending_row_is_named(tmp_path, capsys):
    t = seconds(10)
    t[6] = 1_600  # one bad value on CSV line 8 (header = line 1)
    src, mapping = write(tmp_path, t, "s")
    err = import_error(capsys, tmp_path, src, mapping)
    assert "column 't' line 8: 1600 in unit 's' is 1970-01-01 00:26:40 UTC" in err
    src, mapping = write(tmp_path, t, "s", parquet=True)
    assert "column 't' row 6: 1600" in import_error(capsys, tmp_path, src, mapping)


def test_float_seconds_declared_ms(tmp_path, capsys):
    src, mapping = write(tmp_path, seconds() + 0.25, "ms")
    assert "the likely unit is 's'" in import_error(capsys, tmp_path, src, mapping)


def test_parsed_times_are_range_checked(tmp_path, capsys):
    iso = ["2024-03-01T10:00:00", "1970-01-01T00:00:05", "2024-03-02T10:00:00"]
    src, mapping = write(tmp_path, iso, "iso")
    err = import_error(capsys, tmp_path, src, mapping)
    assert ("column 't' line 3: '1970-01-01T00:00:05' is 1970-01-01 00:00:05 UTC, before "
            "1990-01-01" in err and "(mapping key 'time.column')" in err)
    stamps = pd.to_datetime(seconds(5), unit="ms")  # seconds made into a timestamp as ms
    src, mapping = write(tmp_path, stamps, None, parquet=True)
    err = import_error(capsys, tmp_path, src, mapping)
    assert "column 't' row 0:" in err and "before 1990-01-01" in err


@pytest.mark.parametrize("unit,scale", [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_plausible_times_import(tmp_path, capsys, unit, scale):
    """Every unit works when it is right, ISO text and Parquet timestamps too; a daily file
    (all rows on one day) in a fine unit is fine: only 1970 would make that suspicious."""
    midnight = T0 - T0 % DAY
    for t in (seconds() * scale, seconds(span_days=0.9, start=midnight) * scale):
        src, mapping = write(tmp_path, t, unit)
        out = tmp_path / "out"
        assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                     str(out), "--overwrite"]) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_typed_and_iso_times_import(tmp_path, capsys):
    stamps = pd.to_datetime(seconds(), unit="s")
    for t, unit, parquet in ((stamps, None, True), (stamps.strftime("%Y-%m-%dT%H:%M:%S"),
                                                    "iso", False)):
        src, mapping = write(tmp_path, t, unit, parquet)
        assert main(["data", "import", "--src", str(src), "--mapping", str(mapping), "--out",
                     str(tmp_path / "out"), "--overwrite"]) == 0, capsys.readouterr().err


def test_likely_unit():
    s = seconds().astype(np.float64)
    assert [likely_unit(s * 1000**k) for k in range(4)] == ["s", "ms", "us", "ns"]
    assert likely_unit(np.array([5.0, 6.0])) is None

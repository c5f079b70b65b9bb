"""Event logs and mappings that used to import without a word (or fail with a traceback, or
much later), each now one ``error:`` line, exit code 2 and nothing written: a label that never
holds, a date in the mapping that is no date, a CSV row with a field more or less, a CSV
without a header line; and a run whose student days hold no positive of a task."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.transfer.data.schema import check_window
from gemkd.transfer.errors import ConfigError
from tests.faults.conftest import SPEC, cli_error

T0 = 1_700_000_000
MAPPING = {"time": {"column": "t", "unit": "s"}, "user": "user", "item": "item",
           "labels": {"click": "clicked"}}


def _log(tmp_path: Path, n: int = 60, **columns: list) -> Path:
    frame = pd.DataFrame({"t": [T0 + 3_600 * i for i in range(n)],
                          "user": [i % 7 for i in range(n)], "item": [i % 5 for i in range(n)],
                          "clicked": [int(i % 3 == 0) for i in range(n)],
                          "event": ["view" if i % 3 else "click" for i in range(n)], **columns})
    path = tmp_path / "log.csv"
    frame.to_csv(path, index=False)
    return path


def _import_error(capsys, tmp_path: Path, src: Path, mapping: dict, *flags: str) -> str:
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(mapping))
    out = tmp_path / "out"
    err = cli_error(capsys, "data", "import", "--src", str(src), "--mapping", str(path),
                    "--out", str(out), *flags)
    assert not out.exists()
    return err


@pytest.mark.parametrize("flags", [(), ("--in-memory",)], ids=["streaming", "in_memory"])
def test_a_label_that_never_holds_is_an_error_naming_its_key(tmp_path, capsys, flags):
    src = _log(tmp_path)
    mapping = {**MAPPING, "labels": {"click": "clicked",
                                     "buy": {"column": "event", "op": "==",
                                             "value": "purchase"}}}
    err = _import_error(capsys, tmp_path, src, mapping, *flags)
    assert err == (f"error: {tmp_path / 'map.yaml'}: key 'labels.buy': column 'event' == "
                   "'purchase' holds on none of the log's 60 rows, so task 'buy' has no "
                   "positive to learn or score (a typo in the value or the column?); fix it "
                   "or leave the label out"), err


def test_a_plain_label_of_zeros_is_an_error_too(tmp_path, capsys):
    src = _log(tmp_path, never=[0] * 60)
    err = _import_error(capsys, tmp_path, src, {**MAPPING, "labels": {"x": "never"}})
    assert "key 'labels.x': column 'never' = 1 holds on none of the log's 60 rows" in err


def test_a_date_that_is_no_date_names_its_key(tmp_path, capsys):
    src = _log(tmp_path)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(MAPPING) + "days: {to: 2024-13-45}\n")
    err = cli_error(capsys, "data", "import", "--src", str(src), "--mapping", str(path),
                    "--out", str(tmp_path / "out"))
    assert err == (f"error: {path}: key 'days.to': expected a date such as 2020-01-09, got "
                   "'2024-13-45'"), err


def test_a_date_range_alone_is_utc_calendar_days(tmp_path, capsys):
    from gemkd.transfer.data.importer import load_mapping

    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(MAPPING) + "days: {from: 2023-11-15, to: 2023-11-16}\n")
    days = load_mapping(path).days
    assert (days.calendar, days.first, days.last) == ("UTC", "2023-11-15", "2023-11-16")


@pytest.mark.parametrize("row, fields, why", [
    ("1700000000,1,2,0,view,9", 6, "a field more: a stray delimiter, an unquoted comma in a "
                                   "value?"),
    ("1700000000,1,2", 3, "fields missing: a row cut short?")], ids=["more", "fewer"])
@pytest.mark.parametrize("flags", [(), ("--in-memory",)], ids=["streaming", "in_memory"])
def test_a_row_with_a_field_more_or_less_names_file_and_line(tmp_path, capsys, row, fields,
                                                              why, flags):
    src = _log(tmp_path)
    lines = src.read_text().splitlines()
    lines.insert(4, row)  # line 5 of the file (the header is line 1)
    src.write_text("\n".join(lines) + "\n")
    err = _import_error(capsys, tmp_path, src, MAPPING, *flags)
    assert err == (f"error: {src}: line 5: {fields} fields where the header has 5 ({why}); "
                   "fix or drop the row"), err


def test_a_quoted_value_with_a_comma_or_newline_is_one_field(tmp_path):
    from gemkd.transfer.data.importer import import_logs, parse_mapping

    src = _log(tmp_path, event=["a, \"b\"\nc"] * 60)
    mapping = {**MAPPING, "categorical": ["event"]}
    schema = import_logs(src, parse_mapping(mapping), tmp_path / "out").schema
    assert schema.n_rows == 60


def test_a_headerless_csv_is_named_and_imported_with_header_false(tmp_path, capsys):
    from gemkd.transfer.data.importer import import_logs, parse_mapping

    src = _log(tmp_path)
    headerless = tmp_path / "raw.csv"
    headerless.write_text("".join(src.read_text().splitlines(keepends=True)[1:]))
    err = _import_error(capsys, tmp_path, headerless, MAPPING)
    assert err.startswith(f"error: {tmp_path / 'map.yaml'}: key 'time.column': column 't' is "
                          f"not in {headerless} (its columns: 1700000000, 0, "), err
    assert "); its first line looks like a row of data, not a header" in err
    assert "'header: false' and 'columns: [...]'" in err
    names = ["t", "user", "item", "clicked", "event"]
    with_header = import_logs(src, parse_mapping(MAPPING), tmp_path / "a").schema
    without = import_logs(headerless, parse_mapping({**MAPPING, "header": False,
                                                     "columns": names}), tmp_path / "b").schema
    assert without.rows_per_day == with_header.rows_per_day
    recorded = without.generator["mapping"]
    assert (recorded["header"], recorded["columns"]) == (False, names)
    for day in with_header.days:
        a = pd.read_parquet(tmp_path / "a" / f"day={day}")
        b = pd.read_parquet(tmp_path / "b" / f"day={day}")
        pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("mapping, message", [
    ({"header": False}, "key 'columns': missing (required with header: false"),
    ({"columns": ["t"]}, "key 'columns': names the fields of a CSV without a header line"),
    ({"header": False, "columns": ["t", "t"]}, "key 'columns': 't' is named twice"),
])
def test_header_and_columns_are_checked(mapping, message):
    from gemkd.transfer.data.importer import parse_mapping

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_mapping({**MAPPING, **mapping})


def test_a_window_over_thousands_of_thin_days_is_one_short_line():
    have = sorted({d for d in range(6_205) if d % 57 not in (1, 2)} - {3, 4})
    where = "spec data (import, /data/reviews.csv)"
    for window in ((0, 9), (100, 300)):
        with pytest.raises(ConfigError) as e:
            check_window("teacher_days", window, have, where)
        line = str(e.value)
        assert "\n" not in line and len(line) <= 200, line
        assert f"which has {len(have):,} days in 0..6204, 109 gaps (days: {{buckets: N}} " \
               "has none)" in line
    assert str(e.value).startswith("teacher_days [100, 300): days 115..116, 172..173 +2 runs "
                                   "not in")


def test_run_refuses_a_task_without_positives_in_the_student_days(tmp_path, capsys):
    """Clicks only in the teacher's days: the run stops after the data step, naming the window
    and the task, and leaves no run directory."""
    n = 600
    log = pd.DataFrame({"t": [T0 + 60 * i for i in range(n)], "user": [i % 9 for i in range(n)],
                        "item": [i % 11 for i in range(n)],
                        "clicked": [int(i < 200 and i % 2 == 0) for i in range(n)]})
    log.to_csv(tmp_path / "log.csv", index=False)
    mapping = {**MAPPING, "days": {"buckets": 6}}
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(mapping))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "data": {
        "source": "import", "src": str(tmp_path / "log.csv"),
        "overrides": {"mapping": str(tmp_path / "map.yaml")}}}))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out))
    assert err == (f"error: student_days [3, 5): task 'click' has no positive in spec data "
                   f"(import, {tmp_path / 'log.csv'}) (200 rows, every label 0): it cannot be "
                   "learned or scored; choose days with positives, drop the task, or check the "
                   "mapping's label"), err
    assert not out.exists()

"""``gemkd score``'s day window: one reaching past the dataset's days is one error naming the
days (or buckets, with their dates) the dataset has, never a silently clipped score; and
``student export`` states its evaluation window in the dataset's unit."""

from __future__ import annotations

import dataclasses

import pytest

from gemkd.experiments.artifacts.scoring import check_window
from gemkd.experiments.report.day_unit import window_text
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError

DATES = {str(b): [f"20{10 + b:02d}-01-01", f"20{11 + b:02d}-01-01"] for b in range(18)}


def _bucketed(schema: DatasetSchema) -> DatasetSchema:
    generator = {"mapping": {"days": {"buckets": 18}}, "day_dates": DATES}
    return dataclasses.replace(schema, days=list(range(18)), generator=generator)


def test_a_window_past_the_data_is_one_error_naming_its_days(tiny_data):
    schema = DatasetSchema.load(tiny_data)
    last = max(schema.days)
    check_window(schema, (last, last + 1), "d")  # the last day: fine
    with pytest.raises(ConfigError, match=rf"^d: days \[{last}, {last + 3}\) reach past the "
                                          rf"data; it has days \[0, {last + 1}\)"):
        check_window(schema, (last, last + 3), "d")
    with pytest.raises(ConfigError, match="reach past the data"):
        check_window(schema, (last + 2, last + 5), "d")


def test_a_bucketed_dataset_names_buckets_and_their_dates(tiny_data):
    schema = _bucketed(DatasetSchema.load(tiny_data))
    check_window(schema, (15, 18), "d")
    with pytest.raises(ConfigError, match=r"^d: buckets \[15, 20\) reach past the data; it has "
                                          r"buckets \[0, 18\) \(2010-01-01 to 2028-01-01\)$"):
        check_window(schema, (15, 20), "d")


def test_the_export_window_is_in_the_datasets_unit():
    raw = {"generator": {"mapping": {"days": {"buckets": 18}}, "day_dates": DATES}}
    assert window_text(raw, 15, 18) == "buckets [15, 18) (2025-01-01 to 2028-01-01)"
    assert window_text({"generator": {}}, 5, 6) == "days [5, 6)"
    assert window_text(None, 5, 7) == "days [5, 7)"

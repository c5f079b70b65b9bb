"""A report of a bucketed dataset (an import with ``days: {buckets: N}``, or a schema whose
``day_unit`` is ``bucket``) says "bucket" where it said "day", outside code spans, and opens with
what a bucket is; a dataset of calendar days reads as before."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.report import render_report, report_command
from gemkd.experiments.report.day_unit import BUCKET, DAY, day_unit, in_units
from gemkd.experiments.report.results_md import render_results
from gemkd.transfer.data.importer import import_logs, parse_mapping
from tests.experiments.report.cluster_run import make_cluster_run

#: a day word outside a code span
LOOSE_DAY = re.compile(r"\b[Dd]ays?\b")


def _outside_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.fixture(scope="module")
def bucketed(tmp_path_factory) -> Path:
    """A small review log imported with ``days: {buckets: 6}``."""
    root = tmp_path_factory.mktemp("thin")
    rng = np.random.default_rng(0)
    n = 600
    pd.DataFrame({"time": np.sort(rng.integers(1.4e9, 1.6e9, n)),
                  "user": rng.integers(0, 500, n), "item": rng.integers(0, 40, n),
                  "rating": rng.integers(1, 6, n)}).to_csv(root / "reviews.csv", index=False)
    mapping = parse_mapping({"time": {"column": "time", "unit": "s"}, "days": {"buckets": 6},
                             "user": "user", "item": "item",
                             "labels": {"like": {"column": "rating", "op": ">=", "value": 4}}})
    import_logs(root / "reviews.csv", mapping, root / "data")
    return root / "data"


def _run_on(root: Path, dataset: Path) -> Path:
    run = make_cluster_run(root, worlds=(0,), users=120)
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["data"] = {"source": "dataset", "src": str(dataset)}
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    return run


def test_the_unit_is_read_from_the_schema(bucketed):
    schema = json.loads((bucketed / "schema.json").read_text())
    assert day_unit(schema) == BUCKET  # what the importer records today: its mapping
    assert day_unit({**schema, "day_unit": "day"}) == DAY  # the field, where present, decides
    assert day_unit({"days": [0, 1], "day_unit": "bucket"}) == BUCKET
    assert day_unit({"generator": {"mapping": {"days": {"calendar": "UTC"}}}}) == DAY
    assert day_unit(None) == DAY


def test_in_units_leaves_code_spans_and_identifiers():
    text = ("teacher lag 0 days; a validation day (`teacher_val_days: 1`); Days [0, 4); "
            "the training days' rate; teacher_lag_days; Monday; `days: {buckets: 8}`")
    assert in_units(text, BUCKET) == (
        "teacher lag 0 buckets; a validation bucket (`teacher_val_days: 1`); Buckets [0, 4); "
        "the training buckets' rate; teacher_lag_days; Monday; `days: {buckets: 8}`")
    assert in_units(text, DAY) == text
    # a run's own name keeps its words; a name that is the word itself protects nothing
    assert in_units("# gemkd report: ten-day-trial, 3 days", BUCKET, keep=("ten-day-trial",)) \
        == "# gemkd report: ten-day-trial, 3 buckets"
    assert in_units("lag 0 days", BUCKET, keep=("days", "")) == "lag 0 buckets"


def test_a_bucketed_run_s_report_says_bucket(tmp_path, bucketed):
    run = _run_on(tmp_path / "b", bucketed)
    text = render_report(run)
    paragraphs = text.split("\n\n")
    assert paragraphs[1].startswith("**In short** (domain all, teacher lag 0 buckets;")
    assert paragraphs[2] == (
        "**Buckets, not days:** this dataset's time unit is 6 equal-count time buckets "
        "(`days: {buckets: 6}`): every \"bucket\" below (a teacher lag, a window, the "
        "evaluation) is one of them, however long a stretch of time it spans.")
    assert "## Main result (domain all, task click, teacher lag 0 buckets)" in text
    rest = _outside_code(text.replace(paragraphs[2], ""))
    assert not LOOSE_DAY.findall(rest)
    printed = report_command(run)
    assert "teacher lag 0 buckets" in printed and "**Buckets, not days:**" in printed
    page = render_results([run])
    assert "teacher lag 0 buckets" in page and "**Buckets, not days:**" in page


def test_a_calendar_run_s_report_says_day(tmp_path):
    dataset = tmp_path / "cal"
    dataset.mkdir()
    (dataset / "schema.json").write_text(json.dumps(
        {"days": [0, 1, 2], "generator": {"mapping": {"days": {"calendar": "UTC"}}}}))
    text = render_report(_run_on(tmp_path / "c", dataset))
    assert "teacher lag 0 days" in text and "bucket" not in text.lower()


def test_an_imported_log_s_schema_is_found_in_the_run_s_data_step(tmp_path, bucketed):
    """``data: {source: import}``: the dataset is the run's cached data step; a remote or
    missing dataset reads as days."""
    from gemkd.experiments.report.day_unit import dataset_schema, report_unit
    from gemkd.experiments.run_dir import RunDir

    run = RunDir(tmp_path / "run")
    spec = {"data": {"source": "import", "src": "reviews.csv"}}
    assert dataset_schema(run, spec) is None and report_unit(run, spec) == (DAY, "")
    step = tmp_path / "run" / "cache" / "data-0123abcd"
    (step / "data").mkdir(parents=True)
    (step / "data" / "schema.json").write_text((bucketed / "schema.json").read_text())
    assert report_unit(run, spec)[0] == DAY  # not finished: no DONE
    (step / "DONE").write_text("")
    unit, note = report_unit(run, spec)
    assert unit == BUCKET and note.startswith("**Buckets, not days:** this dataset's time unit "
                                              "is 6 equal-count time buckets")
    remote = {"data": {"source": "dataset", "src": "s3://bucket/data"}}
    assert dataset_schema(RunDir(tmp_path / "other"), remote) is None

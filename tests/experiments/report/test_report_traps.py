"""Traps a first real log found in the report: a one-domain student labelled
"domain all" and shown twice (f), a conversion NE above 1 left unexplained (g), and ΔNE against
sampled negatives beside ΔNE against logged impressions without a marker (i)."""

from __future__ import annotations

import json

import pandas as pd

from gemkd.experiments.report import render_report, report_command
from gemkd.experiments.report.results_md import render_results
from gemkd.experiments.run.results import References, rows_of
from tests.experiments.report.test_report import make_results, make_run


def _refs(domains: list[str]) -> tuple[References, dict]:
    groups = [*domains, "all"]
    metrics = {f"{m}/click/{g}": 0.9 for m in ("ne", "calibration", "auc") for g in groups}
    res = {"metrics": metrics, "train_seconds": 1.0, "examples_per_second": 1.0}
    return References(metrics, {}, {}, ["click"], domains, 0, 0), res


def test_f_a_one_domain_student_s_rows_carry_the_domain_s_name_once():
    refs, res = _refs(["stories"])
    assert [r["domain"] for r in rows_of("kd", 0, res, refs, {})] == ["stories"]
    refs, res = _refs(["a", "b"])  # several domains keep their pooled group
    assert [r["domain"] for r in rows_of("kd", 0, res, refs, {})] == ["a", "b", "all"]
    refs, res = _refs(["all"])  # a one-domain log whose domain is named "all"
    assert [r["domain"] for r in rows_of("kd", 0, res, refs, {})] == ["all"]


def _one_domain(results: pd.DataFrame, name: str = "stories") -> pd.DataFrame:
    """An older run of a one-domain student: its rows twice, as the domain and as "all"."""
    one = results[results["domain"] == "d0"]
    return pd.concat([one.assign(domain=name), one.assign(domain="all")], ignore_index=True)


def test_f_an_older_one_domain_run_is_reported_under_its_domain(tmp_path):
    run = make_run(tmp_path / "r", _one_domain(make_results()))
    text = render_report(run)
    assert "## Main result (domain stories, task click" in text
    assert "domain all" not in text and "by domain" not in text
    assert "synthetic-bench: domain stories, task click" in report_command(run)
    page = render_results([run])
    assert "domain stories, task click" in page and "domain all" not in page


def _with_ne_above_one(results: pd.DataFrame) -> pd.DataFrame:
    out = results.copy()
    conv = out["task"] == "conversion"
    out.loc[conv, ["ne", "ne_baseline"]] += 0.3  # a rare task: worse than its base rate
    return out


def test_g_an_ne_above_one_is_explained_where_it_is_shown(tmp_path):
    plain = render_report(make_run(tmp_path / "plain", make_results()))
    assert "NE above 1" not in plain  # every NE below 1: nothing to explain
    run = make_run(tmp_path / "r", _with_ne_above_one(make_results()))
    text = render_report(run)
    every_task = text.split("## Every task")[1].split("\n## ")[0]
    assert "NE above 1 (conversion:" in every_task
    assert "worse than predicting the training days' base rate" in every_task
    main = text.split("## Main result")[1].split("\n## ")[0]
    assert "NE above 1" not in main  # the main task (click) has none
    page = render_results([run])
    assert "NE above 1" not in page  # its tables show click only


def test_g_the_main_table_s_ne_above_one_is_explained(tmp_path):
    results = make_results()
    results.loc[results["task"] == "click", ["ne", "ne_baseline"]] += 0.3
    run = make_run(tmp_path / "r", results)
    main = render_report(run).split("## Main result")[1].split("\n## ")[0]
    assert "NE above 1 (click: every variant)" in main
    assert "NE above 1 (click: every variant)" in render_results([run])


def test_i_sampled_negative_columns_are_marked_in_markdown(tmp_path):
    logged = make_run(tmp_path / "logged", make_results(), extras=False)
    sampled = make_run(tmp_path / "sampled", make_results(), extras=False)
    (sampled / "sampled_negatives.json").write_text(json.dumps(
        {"per_positive": 4, "from": "items seen before", "seed": 0}))
    page = render_results([logged, sampled])
    header = next(line for line in page.splitlines() if line.startswith("| variant |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[1:3] == ["logged: ΔNE click", "logged: ΔNE conversion"]  # every task
    assert cells[3] == "sampled: ΔNE click (sampled negatives†)"
    assert "† sampled: against sampled negatives (4 per positive, items seen before" in page
    assert "## sampled — " in page and "(sampled negatives)" in page.split("## sampled — ")[1]
    assert "(sampled negatives)" not in page.split("## logged — ")[1].split("\n")[0]
    only_logged = render_results([logged])
    assert "sampled negatives" not in only_logged

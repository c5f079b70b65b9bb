"""The report's primary family (Holm-adjusted, gemkd.experiments.report.family), the teacher
stated first when it is no better than the labels-only student, the forest plots, and A/A
twins — on hand-built run directories with per-user evaluation files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.report import render_report, report_command, what_it_means
from gemkd.experiments.report.family import _domain
from gemkd.experiments.report.forest import write_forest_plots
from gemkd.experiments.report.intervals import UNRESOLVED
from gemkd.experiments.report.summary import RunView
from gemkd.experiments.report.twins import twin_table
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.holm import holm
from tests.experiments.report.cluster_run import make_cluster_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def three_worlds(tmp_path_factory) -> Path:
    return make_cluster_run(tmp_path_factory.mktemp("fam"), worlds=(0, 1, 2), lags=(0, 3))


def _spec(run: Path, **keys) -> None:
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec.update(keys)
    (run / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def test_the_default_family_is_adjusted_by_holm_and_agrees_with_its_intervals(three_worlds):
    fam = RunView(three_worlds).family
    t = fam.table
    assert [(r.a, r.b) for r in t.itertuples()] == [("kd_aux", "kd"), ("kd_repr", "kd"),
                                                   ("kd", "baseline")]
    assert (fam.lag, fam.task, fam.domain, fam.size) == (0, "click", "all", 3)
    h = holm(t["p"].to_numpy(), 0.05)
    np.testing.assert_allclose(t["alpha"], h.alpha)
    np.testing.assert_allclose(t["holm_p"], h.adjusted)
    assert ((t["verdict"] != UNRESOLVED) == h.reject).all()
    excludes = (t["adj_lo"] > 0) | (t["adj_hi"] < 0)
    assert (excludes == h.reject).all()  # each adjusted interval says what Holm decided
    wider = t["alpha"] < 0.05
    assert ((t["adj_hi"] - t["adj_lo"])[wider] > (t["hi"] - t["lo"])[wider]).all()
    assert ((t["adj_lo"] <= t["diff"]) & (t["diff"] <= t["adj_hi"])).all()


def test_a_named_family_with_another_reference(tmp_path, three_worlds):
    import shutil

    run = tmp_path / "named"
    shutil.copytree(three_worlds, run)
    _spec(run, primary={"comparisons": ["kd_aux vs kd_repr", "kd_repr vs baseline"],
                        "task": "conversion", "lag": 3})
    fam = RunView(run).family
    assert fam.named and (fam.lag, fam.task, fam.size) == (3, "conversion", 2)
    r = fam.table.iloc[0]
    assert r["verdict"] in ("beats kd_repr", "below kd_repr", UNRESOLVED)
    bw = RunView(run).intervals.table
    cell = bw[(bw["teacher_lag_days"] == 3) & (bw["domain"] == "all")
              & (bw["task"] == "conversion")].set_index("variant")
    assert r["diff"] == pytest.approx(cell.at["kd_aux", "delta_ne"]
                                      - cell.at["kd_repr", "delta_ne"])
    text = render_report(run)
    assert "The primary family is 2 comparisons (kd_aux vs kd_repr, kd_repr vs baseline) on " \
           "conversion at domain all (teacher lag 3 days)" in text
    main = text.split("## Main result")[1].split("\n## ")[0]
    assert "(primary, Holm" not in main  # the main table is lag 0, click: none of it primary
    _spec(run, primary={"comparisons": ["kd_aux vs full"]})
    with pytest.raises(ConfigError, match=r"spec.yaml: key 'primary': comparison 'kd_aux vs "
                                          r"full': the run has no variant 'full'"):
        render_report(run)


def test_a_one_domain_student_counts_its_domain_once(tmp_path):
    run = make_cluster_run(tmp_path / "one", worlds=(4,), seeds=(0, 1), users=150, samples=100,
                           noise={"baseline": 1.6, "kd": 0.9, "kd_aux": 0.5})
    res = pd.read_csv(run / "results.csv")
    d0 = res[res["domain"] == "d0"]
    # an older run's one-domain student: its rows once under its name, once as "all"
    pd.concat([d0, d0.assign(domain="all")]).to_csv(run / "results.csv", index=False)
    view = RunView(run)
    assert view.family.domain == "d0" and view.family.size == 2
    assert set(view.csv_table["domain"]) == {"d0"}
    assert _domain("all", ["stories"], "x") == "stories"
    assert _domain(None, ["all", "d0", "d1"], "x") == "all"
    with pytest.raises(ConfigError, match="domain 'ads': the run has d0, d1"):
        _domain("ads", ["d0", "d1"], "x")


def test_a_teacher_worse_than_the_baseline_is_the_report_s_first_sentence(tmp_path):
    noise = {"baseline": 1.6, "kd": 0.9}
    run = make_cluster_run(tmp_path / "bad", worlds=(0, 1, 2), teacher_noise=2.6, noise=noise,
                           users=150)
    text = render_report(run)
    first = text.split("\n\n")[1]
    assert first.startswith("The teacher is not better than the labels-only student on the "
                            "evaluation data: NE ")
    assert "vs the baseline's " in first.split(". ")[0]
    table = RunView(run).intervals.table
    main = table[(table["domain"] == "all") & (table["task"] == "click")].set_index("variant")
    assert (main["teacher_vs_baseline_lo"] > 0).all()  # worse on the family's slice, resolved
    assert main.at["kd", "teacher_vs_baseline"] == pytest.approx(
        main.at["kd", "teacher_ne"] - main.at["baseline", "ne"])
    assert "knowledge reaches the student" not in text
    sents = " ".join(what_it_means(run))
    assert "none of it is the teacher's knowledge reaching the student" in sents
    assert "is not its knowledge reaching the student" in sents
    good = render_report(make_cluster_run(tmp_path / "good", worlds=(0, 1, 2), noise=noise,
                                          users=150))
    assert "The teacher is not better" not in good and "knowledge reaches the student" in good


def test_forest_plots_per_task_and_lag(three_worlds, tmp_path):
    out = report_command(three_worlds)
    plots = three_worlds / "plots"
    names = sorted(p.name for p in plots.glob("forest_*.png"))
    assert names == ["forest_click_lag0.png", "forest_click_lag3.png",
                     "forest_conversion_lag0.png", "forest_conversion_lag3.png"]
    for n in names:
        assert (plots / n).read_bytes()[:8] == PNG and f"wrote {plots / n}" in out
    text = (three_worlds / "report.md").read_text()
    assert all(f"![{n[:-4]}](plots/{n})" in text.split("## Plots")[1] for n in names)
    (three_worlds / "clusters").rename(three_worlds / "clusters_off")  # now without intervals
    try:
        assert write_forest_plots(RunView(three_worlds)) == []
        assert not list(plots.glob("forest_*.png"))  # stale ones removed
    finally:
        (three_worlds / "clusters_off").rename(three_worlds / "clusters")


def test_twins_are_counted_and_kept_out_of_the_family(tmp_path):
    noise = {"baseline": 1.6, "kd": 0.9, "kd_aux": 0.5, "kd_twin1": 0.9, "kd_aux_twin1": 0.5}
    run = make_cluster_run(tmp_path / "twins", worlds=(0, 1, 2), noise=noise)
    _spec(run, variants={"baseline": [], "kd": ["kd"], "kd_aux": ["kd", "aux_head"],
                         "kd_twin1": {"methods": ["kd"], "twin_of": "kd"},
                         "kd_aux_twin1": {"methods": ["kd", "aux_head"], "twin_of": "kd_aux"}},
          twins={"kd": 1, "kd_aux": 1})
    view = RunView(run)
    assert [(r.a, r.b) for r in view.family.table.itertuples()] == [("kd_aux", "kd"),
                                                                   ("kd", "baseline")]
    tw = twin_table(view)
    assert len(tw) == 2 * 3 * 2  # 2 twins × 3 domains (d0, d1, all) × 2 tasks
    aux = tw[(tw["twin"] == "kd_aux_twin1") & (tw["domain"] == "all") & (tw["task"] == "click")]
    cell = view.intervals.table
    cell = cell[(cell["domain"] == "all") & (cell["task"] == "click")].set_index("variant")
    assert aux["diff"].iloc[0] == pytest.approx(cell.at["kd_aux_twin1", "delta_ne"]
                                                - cell.at["kd_aux", "delta_ne"])
    resolved = int((tw["verdict"] != UNRESOLVED).sum())
    text = render_report(run)
    first = text.split("\n\n")[2]
    assert f"A/A twins: 12 comparisons of a twin with its original (per task, lag and " \
           f"domain), {resolved} resolved" in first
    section = text.split("## A/A twins")[1].split("\n## ")[0]
    assert "| kd_twin1 | kd | 6 |" in section and "| kd_aux_twin1 | kd_aux | 6 |" in section


def test_a_twin_comparison_without_an_interval_is_not_resolved():
    """An original's evaluation files missing (its runs reused from another run directory)
    leaves the comparison without an interval: it is not a resolved (false) verdict."""
    import pandas as pd

    from gemkd.experiments.report.twins import COLUMNS, twin_counts

    nan = float("nan")
    rows = [dict(twin="kd_twin1", original="kd", teacher_lag_days=0, domain="all", task="click",
                 diff=nan, lo=nan, hi=nan, verdict="", identical=False),
            dict(twin="kd_twin1", original="kd", teacher_lag_days=0, domain="all", task="ctr",
                 diff=0.01, lo=0.002, hi=0.02, verdict="beats KD", identical=False),
            dict(twin="kd_twin2", original="kd", teacher_lag_days=0, domain="all", task="click",
                 diff=0.0, lo=-0.01, hi=0.01, verdict="not resolved", identical=False)]
    assert twin_counts(pd.DataFrame(rows, columns=COLUMNS)) == (3, 1)

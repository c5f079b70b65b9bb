"""The report layer: summary numbers, report.md text, generated sentences, plots, errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.report import (
    render_report,
    report_command,
    summarize,
    what_it_means,
    write_plots,
    write_report,
)
from gemkd.experiments.spec import DEFAULT_VARIANTS
from gemkd.transfer.errors import ConfigError

#: the variants a spec that names none runs (the report orders every built-in one the same way)
VARIANTS = tuple(DEFAULT_VARIANTS)

SEEDS = (0, 1, 2)
LAGS = (0, 7)
DOMAINS = ("all", "d0", "d1")
TASKS = ("click", "conversion")
EFFECTS = {"baseline": 0.0, "kd": 0.010, "kd_aux": 0.014, "kd_aux_adapter": 0.012,
           "kd_repr": 0.011, "hierarchical": 0.009, "full": 0.013}
PNG = b"\x89PNG\r\n\x1a\n"


def make_results(effects: dict[str, float] = EFFECTS, lags=LAGS) -> pd.DataFrame:
    """NE = 0.80 + offsets + 0.002·seed − effect·(1 − lag/14) + 0.0004·((seed + i_v) % 3 − 1)."""
    rows = []
    for lag in lags:
        for d_off, domain in zip((0.0, -0.01, 0.01), DOMAINS, strict=True):
            for t_off, task in zip((0.0, 0.05), TASKS, strict=True):
                for seed in SEEDS:
                    def ne(v, seed=seed, lag=lag, d_off=d_off, t_off=t_off):
                        i = VARIANTS.index(v)
                        return (0.80 + d_off + t_off + 0.002 * seed
                                - effects[v] * (1 - lag / 14) + 0.0004 * ((seed + i) % 3 - 1))
                    base, kd = ne("baseline"), ne("kd")
                    teacher = 0.78 + d_off + t_off + 0.001 * lag
                    for v in VARIANTS:
                        n = ne(v)
                        rows.append(dict(
                            variant=v, seed=seed, domain=domain, task=task,
                            teacher_lag_days=lag, ne=n, auc=0.70 + effects[v], calibration=1.0,
                            ne_baseline=base, ne_teacher=teacher, ne_oracle=0.70 + d_off + t_off,
                            delta_ne=base - n, transfer_ratio=(base - n) / (base - teacher),
                            efficiency_vs_kd=(base - n) / (base - kd), train_seconds=1.0,
                            examples_per_second=1e5))
    return pd.DataFrame(rows)


def make_run(root: Path, results: pd.DataFrame, extras: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    results.to_csv(root / "results.csv", index=False)
    if extras:
        (root / "spec.yaml").write_text(yaml.safe_dump({
            "name": "synthetic-bench", "seeds": list(SEEDS), "variants": list(VARIANTS),
            "teacher_lag_days": sorted(results["teacher_lag_days"].unique().tolist()),
            "data": {"config": "experiments/data/tiny.yaml", "train_days": 4},
            "student": {"class_path": "gemkd.students.MLP", "hidden": 64}}))
        pd.DataFrame([
            dict(variant="kd", param="lambda", value=0.5, chosen=False, val_ne=0.81),
            dict(variant="kd", param="lambda", value=1.0, chosen=True, val_ne=0.80),
            dict(variant="kd", param="T", value=2.0, chosen=True, val_ne=0.80),
        ]).to_csv(root / "tuning.csv", index=False)
        (root / "curves").mkdir(exist_ok=True)
        for v in ("baseline", "kd"):
            for s in SEEDS:
                steps = np.arange(0, 100, 10)
                pd.DataFrame({"step": steps, "train_loss": 1 / (1 + steps + s),
                              "kd_loss": 0.5 / (1 + steps)}).to_csv(
                    root / "curves" / f"{v}_seed{s}_lag0.csv", index=False)
    return root


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("run"), make_results())


def _cell(summary: pd.DataFrame, variant: str, lag=0, domain="all", task="click") -> pd.Series:
    s = summary[(summary["variant"] == variant) & (summary["teacher_lag_days"] == lag)
                & (summary["domain"] == domain) & (summary["task"] == task)]
    assert len(s) == 1
    return s.iloc[0]


def test_summary_matches_hand_computed():
    summary = summarize(make_results())
    assert len(summary) == 2 * 7 * 3 * 2
    # kd, lag 0, all, click: 0.80 + 0.002·s − 0.010 + 0.0004·[0, 1, −1]
    kd_ne = [0.790, 0.7924, 0.7936]
    base_ne = [0.7996, 0.8020, 0.8044]  # baseline: 0.80 + 0.002·s + 0.0004·[−1, 0, 1]
    kd = _cell(summary, "kd")
    assert kd["n_seeds"] == 3
    assert kd["ne_mean"] == pytest.approx(0.792)
    assert kd["ne_std"] == pytest.approx(np.std(kd_ne, ddof=1))
    delta = np.subtract(base_ne, kd_ne)  # [0.0096, 0.0096, 0.0108]
    assert kd["delta_ne_mean"] == pytest.approx(0.0100)
    assert kd["delta_ne_std"] == pytest.approx(np.std(delta, ddof=1))
    tr = delta / (np.array(base_ne) - 0.78)
    assert kd["transfer_ratio_mean"] == pytest.approx(tr.mean())
    assert kd["transfer_ratio_std"] == pytest.approx(np.std(tr, ddof=1))
    gap = delta / (np.array(base_ne) - 0.70)
    assert kd["gap_closed_mean"] == pytest.approx(gap.mean())
    assert kd["gap_closed_std"] == pytest.approx(np.std(gap, ddof=1))
    assert kd["efficiency_vs_kd_mean"] == pytest.approx(1.0)
    assert kd["efficiency_vs_kd_std"] == pytest.approx(0.0, abs=1e-12)
    # lag 7 halves the effect (1 − 7/14): kd_aux at conversion, domain d1
    aux = _cell(summary, "kd_aux", lag=7, domain="d1", task="conversion")
    aux_ne = [0.80 + 0.01 + 0.05 + 0.002 * s - 0.007 + 0.0004 * ((s + 2) % 3 - 1) for s in SEEDS]
    assert aux["ne_mean"] == pytest.approx(np.mean(aux_ne))
    assert aux["ne_std"] == pytest.approx(np.std(aux_ne, ddof=1))
    # canonical order within a (lag, domain, task) block; all first, click first
    first = summary.iloc[:7]
    assert first["variant"].tolist() == list(VARIANTS)
    assert set(first["domain"]) == {"all"} and set(first["task"]) == {"click"}


def test_gap_closed_is_nan_without_oracle():
    res = make_results()
    res["ne_oracle"] = np.nan
    kd = _cell(summarize(res), "kd")
    assert np.isnan(kd["gap_closed_mean"]) and np.isnan(kd["ne_oracle_mean"])
    assert kd["ne_mean"] == pytest.approx(0.792)


def test_report_contents(run_dir):
    path = write_report(run_dir)
    text = path.read_text()
    assert path == run_dir / "report.md"
    assert text.startswith("# gemkd report: synthetic-bench")
    main = text.split("## Main result")[1].split("##")[0]
    assert "| kd | 0.7920 ± 0.0018 | 0.0100 ± 0.0007 |" in main
    assert "| baseline | 0.8020 ± 0.0024 | 0.0000 ± 0.0000 |" in main
    assert [ln.split(" | ")[0] for ln in main.splitlines() if ln.startswith("| ")][1:] == \
        [f"| {v}" for v in VARIANTS]
    assert "teacher NE 0.7800 ± 0.0000" in main and "oracle NE 0.7000 ± 0.0000" in main
    every = text.split("## Every task")[1].split("##")[0]
    # conversion adds 0.05 to every NE
    assert "| conversion | kd | 0.8420 ± 0.0018 |" in every
    lag = text.split("## ΔNE vs teacher lag")[1].split("##")[0]
    assert "lag 0" in lag and "lag 7" in lag
    assert "| kd | 0.0100 ± 0.0007 | 0.0050 ± 0.0007 |" in lag
    assert "| chosen |" in text and "| kd | lambda | 0.5, 1 | 1 | 0.8000 |" in text
    assert "gemkd.students.MLP" in text and "train_days=4" in text and "[0, 7]" in text
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]  # no temp left


def _sentences(run: Path) -> list[str]:
    sents = what_it_means(run)
    assert len(sents) == 2
    text = " ".join(sents)
    assert len(re.split(r"(?<=\.)\s+(?=[A-Z])", text)) == 2
    assert text in render_report(run)
    return sents


def test_what_it_means_follows_the_data(tmp_path):
    aux_best = _sentences(make_run(tmp_path / "a", make_results(), extras=False))
    assert "best variant" in aux_best[0] and "is kd_aux" in aux_best[0]
    assert "0.0040" in aux_best[0] and "more than 2 std" in aux_best[0]  # 0.014 − 0.010
    assert "lowers NE by 0.0100" in aux_best[1] and "more than 2 std" in aux_best[1]

    kd_best = _sentences(make_run(tmp_path / "b", make_results(
        {**EFFECTS, "kd": 0.020}), extras=False))
    assert kd_best[0].startswith("Plain KD is the best variant")
    assert "kd_aux" in kd_best[0] and "0.0060" in kd_best[0]
    assert "lowers NE by 0.0200" in kd_best[1]
    assert kd_best != aux_best

    # KD no better than the baseline, and kd_aux only 0.0003 above KD: within noise
    weak = _sentences(make_run(tmp_path / "c", make_results(
        {**EFFECTS, "kd": 0.0002, "kd_aux": 0.0005, "kd_aux_adapter": 0.0, "kd_repr": 0.0,
         "hierarchical": 0.0, "full": 0.0}), extras=False))
    assert "is kd_aux" in weak[0] and "within 2 std" in weak[0]
    assert "within 2 std" in weak[1] and "not distinguishable" in weak[1]


def test_plots_are_pngs(run_dir):
    paths = write_plots(run_dir)
    names = sorted(p.name for p in paths)
    assert names == ["ne_by_variant.png", "ne_vs_lag.png", "training_curves.png",
                     "transfer_ratio.png"]
    for p in paths:
        assert p.parent == run_dir / "plots"
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 5000
    assert not [p for p in (run_dir / "plots").iterdir() if p.name.startswith(".")]


def test_single_lag_no_curves(tmp_path):
    run = make_run(tmp_path / "r", make_results(lags=(0,)), extras=False)
    names = sorted(p.name for p in write_plots(run))
    assert names == ["ne_by_variant.png", "transfer_ratio.png"]
    text = render_report(run)
    assert "ΔNE vs teacher lag" not in text and "No `tuning.csv`" in text
    assert "No `spec.yaml`" in text and "## Plots" in text


def test_report_command(run_dir):
    out = report_command(run_dir)
    assert "| kd | 0.7920 ± 0.0018 |" in out
    assert f"wrote {run_dir / 'report.md'}" in out
    assert "ne_by_variant.png" in out


def test_missing_column_names_it(tmp_path):
    run = make_run(tmp_path / "r", make_results().drop(columns=["ne"]), extras=False)
    with pytest.raises(ConfigError, match=r"results\.csv: missing column 'ne'"):
        render_report(run)
    with pytest.raises(ConfigError, match="missing column 'transfer_ratio'"):
        summarize(make_results().drop(columns=["transfer_ratio"]))


def test_missing_and_corrupt_results(tmp_path):
    with pytest.raises(ConfigError, match=r"results\.csv: results file not found"):
        write_report(tmp_path)
    with pytest.raises(ConfigError, match="results.csv"):
        write_plots(tmp_path)
    (tmp_path / "results.csv").write_text("")
    with pytest.raises(ConfigError, match="empty"):
        report_command(tmp_path)
    bad = make_results()
    bad["ne"] = bad["ne"].astype(object)
    bad.loc[5, "ne"] = "oops"
    bad.to_csv(tmp_path / "results.csv", index=False)
    with pytest.raises(ConfigError, match=r"column 'ne' row 6: expected a number, got 'oops'"):
        render_report(tmp_path)
    make_results().pipe(lambda f: pd.concat([f, f.iloc[:1]])).to_csv(
        tmp_path / "results.csv", index=False)
    with pytest.raises(ConfigError, match="duplicate row for variant=baseline seed=0"):
        render_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_results_page_puts_runs_side_by_side(run_dir, tmp_path):
    from gemkd.experiments.cli import main

    results = make_results({**EFFECTS, "kd": 0.004})
    other = make_run(tmp_path / "other", results[results.variant.isin(["baseline", "kd"])])
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--markdown", str(out), str(run_dir), str(other)]) == 0
    text = out.read_text()
    assert text.count("\n## ") == 3  # the side-by-side table, then one section per run
    summary = text.split("\n## ")[1]
    assert "| kd | 0.0100 ± " in summary and " | 0.0040 ± " in summary
    assert "| full | 0.0130 ± " in summary and summary.count("—") >= 1  # not in the other run
    assert "Tuned knobs (validation day)" in text and "What holds and what does not" in text
    # both runs sweep lags 0 and 7: each section carries its staleness table
    assert text.count("### ΔNE vs teacher lag") == 2 and "| teacher (ΔNE_FM) |" in text
    assert main(["report", str(run_dir), str(other)]) == 2  # several only with --markdown


# ---- runs with per-user evaluation files: intervals and verdicts ---------------------------------

@pytest.fixture(scope="module")
def cluster_run_dir(tmp_path_factory) -> Path:
    from tests.experiments.report.cluster_run import make_cluster_run

    return make_cluster_run(tmp_path_factory.mktemp("clusters"), worlds=(0, 1, 2), lags=(0, 3))


CI = r"-?\d\.\d{4} \[-?\d\.\d{4}, -?\d\.\d{4}\]"


def test_report_states_the_rule_and_shows_intervals(cluster_run_dir):
    out = report_command(cluster_run_dir)
    text = (cluster_run_dir / "report.md").read_text()
    first = text.split("\n\n")[2]  # [1]: the answer paragraph
    assert first.startswith("The primary family is 3 comparisons (each variant against plain KD "
                            "and plain KD against the labels-only baseline) on click at domain "
                            "all (teacher lag 0 days), adjusted together by Holm's step-down at "
                            "5 % family-wise (two-sided)")
    assert ("Intervals are 95 % intervals of paired differences (200 resamples of the "
            "evaluation users, seed 0, the same draws for every variant): t intervals over the "
            "worlds' paired, seed-averaged values") in first
    assert "excludes 0" in first and "not part of the rule" in first
    assert "mean over the 3 worlds (0, 1, 2)" in first
    assert re.search(r"the ΔNE intervals' half-width is 0\.\d{4} \(median", first)
    assert "2 std" not in text
    main = text.split("## Main result")[1].split("\n## ")[0]
    lines = [ln for ln in main.splitlines() if ln.startswith("| ")]
    assert "| ΔNE vs baseline [95 % CI] |" in lines[0] and "efficiency vs KD [95 % CI]" in lines[0]
    assert [f"world {w}: ΔNE (eff.)" in lines[0] for w in (0, 1, 2)] == [True] * 3
    aux = next(ln for ln in lines if ln.startswith("| kd_aux |"))
    assert re.match(rf"\| kd_aux \| {CI} \| {CI} \| real gain \(exploratory; 3/3 worlds\) \| "
                    rf"{CI}† \| 1\.\d\d× \[1\.\d\d, 1\.\d\d\]† \| beats KD \(primary, Holm; 3/3 "
                    r"worlds\) \|", aux)
    assert aux.count("×)") == 3  # each world's ΔNE with its efficiency
    assert re.search(rf"\| kd_repr \| {CI} \| {CI} \| real gain \(exploratory; 3/3 worlds\) \| "
                     rf"{CI}† \| .+ \| not resolved \(primary, Holm; [0-3]/3 worlds\) \|", main)
    assert "![forest_click_lag0](plots/forest_click_lag0.png)" in main
    by_domain = text.split("## ΔNE vs baseline by domain")[1].split("\n## ")[0]
    assert re.search(rf"\| kd \| {CI} \| {CI} \| {CI} \|", by_domain)
    by_lag = text.split("## ΔNE vs teacher lag")[1].split("\n## ")[0]
    assert re.search(rf"\| kd_aux \| {CI} \| {CI} \|", by_lag)
    sents = _sentences(cluster_run_dir)
    assert sents[0].startswith("Of the 3 primary comparisons on click at domain all (teacher "
                               "lag 0 days), 2 are resolved after Holm's adjustment: kd_aux "
                               "beats plain KD by ")
    assert "best" not in sents[0]
    assert ("a real gain after Holm's adjustment (3 of 3 worlds agree), so the teacher's "
            "knowledge") in sents[1]
    written = pd.read_csv(cluster_run_dir / "intervals.csv")
    assert f"wrote {cluster_run_dir / 'intervals.csv'}" in out
    assert len(written) == 2 * 3 * 2 * 4 and written["delta_ne_lo"].notna().all()
    primary = written[(written["kd_family"] == "primary") | (written["gain_family"] == "primary")]
    assert sorted(primary["variant"]) == ["baseline", "kd", "kd_aux", "kd_repr"]
    assert (primary["teacher_lag_days"] == 0).all() and (primary["task"] == "click").all()
    assert set(written["kd_family"].dropna()) <= {"primary", "exploratory"}
    assert written.iloc[0][["teacher_lag_days", "domain", "task", "variant"]].tolist() == \
        [0, "all", "click", "baseline"]


def test_report_of_one_world_says_its_verdicts_are_that_worlds(tmp_path):
    from tests.experiments.report.cluster_run import make_cluster_run

    run = make_cluster_run(tmp_path / "r", worlds=(4,), noise={"baseline": 1.6, "kd": 0.9,
                                                               "kd_repr": 0.95})
    text = render_report(run)
    first = text.split("\n\n")[2]
    assert "This run has one world (world 4), so every verdict here is that one world's" in first
    assert "world 4: ΔNE" not in text  # per-world columns only with several worlds
    sents = _sentences(run)
    assert sents[0].startswith("Of the 2 primary comparisons on click at domain all (teacher "
                               "lag 0 days), 1 is resolved after Holm's adjustment: kd is a "
                               "real gain over the labels-only baseline, ΔNE ")
    assert "kd_repr" not in sents[0]  # kd_repr vs kd is not resolved: no headline


def test_report_of_a_run_without_clusters_says_it_has_no_verdicts(run_dir):
    text = render_report(run_dir)
    assert text.split("\n\n")[2].startswith("This run predates per-user evaluation files")
    sents = what_it_means(run_dir)
    assert "not a verdict" in sents[0] and "not a verdict" in sents[1]
    assert "real" not in " ".join(sents)
    report_command(run_dir)
    written = pd.read_csv(run_dir / "intervals.csv")
    assert written["delta_ne_lo"].isna().all() and written["delta_ne"].notna().all()


def test_results_page_shows_intervals_and_rule(cluster_run_dir, run_dir, tmp_path):
    from gemkd.experiments.report.results_md import write_results

    text = write_results(tmp_path / "RESULTS.md", [cluster_run_dir, run_dir]).read_text()
    summary = text.split("\n## ")[1]
    # a column per run and task: the cluster run's click, its conversion, the other run's click
    assert re.search(rf"\| kd_aux \| {CI} \(real gain, exploratory\) \| [^|]+ \| 0\.0140 ± ",
                     summary)
    assert re.search(rf"\| kd \| {CI} \(real gain, primary†\) \| [^|]+ \| 0\.0100 ± ", summary)
    assert "adjusted together by Holm's step-down at 5 %" in text.split("\n## ")[0]
    clusters, old = text.split("\n## ")[2:]
    assert "Intervals are 95 % intervals of paired differences" in clusters
    assert "| real gain" in clusters
    assert "This run predates per-user evaluation files" in old
    assert "Student Adapter in isolation" not in text  # no probe in these runs


def test_results_page_points_to_its_tuned_knobs_table(cluster_run_dir, tmp_path):
    """The knobs go to a table page beside the results page (``<stem>_knobs.md``), one line on
    the page points to it; a run that tuned nothing says so on both."""
    import shutil

    from gemkd.experiments.report.results_md import knobs_path, write_results

    run = tmp_path / "run"
    shutil.copytree(cluster_run_dir, run)
    pd.DataFrame([dict(variant=v, param=p, value=x, chosen=True, val_ne=0.9, world=w, draw=d)
                  for v, p, x in (("kd", "alpha", 0.25), ("kd", "temperature", 2.0),
                                  ("kd_aux", "aux_beta", 3.0))
                  for w in (0, 1) for d in (0, 1)]).to_csv(run / "tuning.csv", index=False)
    untuned = tmp_path / "untuned"
    shutil.copytree(cluster_run_dir, untuned)
    (untuned / "tuning.csv").unlink(missing_ok=True)
    page = write_results(tmp_path / "PAGE.md", [run, untuned])
    assert knobs_path(page) == tmp_path / "PAGE_knobs.md"
    text, knobs = page.read_text(), knobs_path(page).read_text()
    pointers = re.findall(r"Tuned knobs \(validation day\): .*", text)
    assert len(pointers) == 2 and "alpha=" not in text
    assert re.fullmatch(r"Tuned knobs \(validation day\): a table in \[PAGE_knobs\.md\]"
                        r"\(PAGE_knobs\.md\), section “.+”\.", pointers[0])
    assert pointers[1] == "Tuned knobs (validation day): none."
    assert knobs.startswith("# gemkd results: tuned knobs\n") and "[PAGE.md](PAGE.md)" in knobs
    first, second = knobs.split("\n## ")[1:]
    assert ("| variant | world | seed | alpha | temperature | aux_beta |\n|---|---|---|---:|"
            in first)
    assert "| kd | 1 | 0 | 0.25 | 2 | — |" in first and "| kd_aux | 1 | 1 | — | — | 3 |" in first
    assert len(re.findall(r"^\| kd", first, re.M)) == 8
    assert second.rstrip().endswith("No knob was tuned.")


def test_results_page_carries_the_adapter_probe_summary(cluster_run_dir, tmp_path):
    """The probe's summary goes in; it is flagged outdated unless it records the run's current
    tuning.csv."""
    import json
    import shutil

    from gemkd.experiments.report.results_md import PROBE_SOURCE, PROBE_SUMMARY, write_results
    from gemkd.experiments.run_dir import RunDir

    run = tmp_path / "run"
    shutil.copytree(cluster_run_dir, run)
    summary = run / PROBE_SUMMARY
    summary.parent.mkdir()
    summary.write_text("# Student Adapter probe: x\n\n| arm | reference |\n|---|---|\n"
                       "| kd_adapter | kd |\n")
    pd.DataFrame([dict(variant="kd", param="alpha", value=0.5, chosen=True, val_ne=0.9)]
                 ).to_csv(run / "tuning.csv", index=False)

    def section() -> str:
        text = write_results(tmp_path / "RESULTS.md", [run]).read_text()
        return text.split("### The Student Adapter in isolation")[1]

    assert "| kd_adapter | kd |" in section() and "# Student Adapter probe" not in section()
    assert "**Outdated:**" in section()  # records no source
    (summary.parent / PROBE_SOURCE).write_text(json.dumps({"tuning_sha256":
                                                           RunDir(run).tuning_digest()}))
    assert "**Outdated:**" not in section()
    pd.DataFrame([dict(variant="kd", param="alpha", value=0.7, chosen=True, val_ne=0.9)]
                 ).to_csv(run / "tuning.csv", index=False)  # the run searched again
    assert "**Outdated:**" in section() and "| kd_adapter | kd |" in section()


def test_a_single_domain_run_has_no_by_domain_table(tmp_path):
    """A student of one domain: its column would repeat the "all" column."""
    from gemkd.experiments.report.render import render_report

    results = make_results()
    one = make_run(tmp_path / "one", results[results["domain"].isin(["all", "d0"])],
                   extras=False)
    text = render_report(one)
    assert "by domain" not in text and "## Main result" in text
    two = make_run(tmp_path / "two", results, extras=False)
    assert "## ΔNE vs baseline by domain" in render_report(two)


def test_a_report_states_the_thread_counts_it_was_made_at(tmp_path):
    import json

    from gemkd.experiments.cli import main
    from gemkd.experiments.report.table_names import threads_text

    run = make_run(tmp_path / "run", make_results())
    assert threads_text(run) == "" and "torch thread" not in render_report(run)  # no file
    (run / "environment.json").write_text(json.dumps({"threads": 1, "run_threads": 1}))
    text = threads_text(run)
    assert text.startswith("Made at 1 torch thread(s) in the command's process")
    assert "1 in each student run" in text and "`--threads 1` reproduces it" in text
    assert text in render_report(run)
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--markdown", str(out), str(run)]) == 0
    assert f"Run directory `{run}`; " in out.read_text() and text in out.read_text()
    # steps and student runs at different counts: no single --threads reproduces it
    (run / "environment.json").write_text(json.dumps({"threads": 2, "run_threads": 1}))
    assert "2 torch thread(s)" in threads_text(run) and "reproduces" not in threads_text(run)
    (run / "environment.json").write_text(json.dumps({"threads": 2}))  # before run_threads
    assert "an unrecorded count in the student runs" in threads_text(run)


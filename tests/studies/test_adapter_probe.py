"""``studies/adapter_probe.py`` on a tiny streaming run: it finds the run's cells from its
cache, retrains the run's variants to the run's own figures, measures the adapter's own gain
with the report's paired bootstrap, and bins what each trained adapter learned."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.run_dir import LAYOUT_VERSION, RunDir
from gemkd.experiments.run_dir.run_cells import find_cells, teacher_fits
from studies.adapter_probe import main
from tests.studies.runs import spec_run

SPEC = {
    "name": "probe", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32}},
    "teacher_protocol": "streaming", "teacher_window_days": 1,
    "teacher_days": 4, "student_days": [4, 5], "eval_days": [5, 6], "teacher_lag_days": [0, 2],
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click"], "student_domain": "stories",
    "variants": ["baseline", "kd", "kd_aux", "kd_aux_adapter"],
    "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "aux_beta": [1.0],
                         "adapter_hidden": [4], "lr": [0.01]}},
}
ARMS = ["kd", "kd_adapter", "kd_aux", "kd_aux_adapter", "kd_aux_adapter_separate"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return spec_run(tmp_path_factory, "probe", SPEC)


@pytest.fixture(scope="module")
def probe(run):
    out = run / "probe"
    return out, main(["--run", str(run), "--out", str(out), "--arms", *ARMS])


def test_cells_found_from_the_cache(run):
    rd = RunDir(run)
    cells = find_cells(rd, plan_run(rd.run_spec()).seen)
    assert [(c.world, c.lag, c.trained_until_day) for c in cells] == [(0, 0, 3), (0, 2, 1)]
    assert all(c.data.is_dir() and c.stores["gem"].is_dir() for c in cells)


def test_the_run_read_through_run_dir(run):
    """What the runner wrote is where RunDir says: its layout version, spec, results, ledger,
    curves and per-user evaluation files."""
    rd = RunDir(run)
    assert rd.layout_version == LAYOUT_VERSION
    assert rd.run_spec().name == "probe" and rd.spec()["student_domain"] == "stories"
    results = rd.results()
    assert set(results["domain"]) == {"stories"}  # a one-domain student: no "all" rows
    assert set(results["teacher_lag_days"]) == {0, 2} and set(results["world"]) == {0}
    finals = rd.final_runs()
    assert {(f.variant, f.seed, f.lag, f.world) for f in finals} == {
        (v, 0, lag, None) for v in SPEC["variants"] for lag in (0, 2)}
    for f in finals:
        assert rd.curve_path(f.variant, f.seed, f.lag).is_file()
        assert rd.clusters_path(0, f.lag, f"{f.variant}__seed{f.seed}").is_file()
    assert rd.clusters_path(0, 0, "teacher__gem").is_file()
    assert [(w, lag) for w, lag, _ in rd.eval_folders()] == [(0, 0), (0, 2)]
    curves = rd.curves()
    assert set(curves["variant"]) == set(SPEC["variants"])
    assert rd.tuning() is not None and rd.environment()["run_threads"] >= 1
    assert set(rd.teacher_data()["0"]) == {"0", "2"} and rd.sampled_negatives() is None
    (fit,) = teacher_fits(rd)
    assert fit.seed == 0 and (fit.run / "checkpoints").is_dir() and fit.data.is_dir()


def test_the_probe_reproduces_the_runs_own_variants(run, probe):
    out, _ = probe
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 * (len(ARMS) + 1)  # two lags × (arms + baseline) × one seed
    results = pd.read_csv(run / "results.csv")
    for r in records:
        if r["arm"] not in SPEC["variants"]:
            continue
        ref = results[(results.variant == r["arm"]) & (results.teacher_lag_days == r["lag"])
                      & (results.domain == "stories") & (results.task == "click")]
        assert r["ne"]["click"] == pytest.approx(float(ref["ne"].iloc[0]), abs=1e-6)
    main(["--run", str(run), "--out", str(out), "--arms", *ARMS])  # a rerun trains nothing
    assert len((out / "records.jsonl").read_text().splitlines()) == len(records)


def test_own_gain_is_the_paired_difference(probe):
    out, res = probe
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    ne = {(r["arm"], r["lag"]): r["ne"]["click"] for r in records}
    g = res["gains"]
    g = g[(g.domain == "stories") & (g.task == "click")]
    assert set(zip(g.variant, g.reference, strict=True)) == {
        ("kd_adapter", "kd"), ("kd_aux_adapter", "kd_aux"),
        ("kd_aux_adapter_separate", "kd_aux")}
    for _, r in g.iterrows():
        lag = r["teacher_lag_days"]
        assert r["diff"] == pytest.approx(ne[r["reference"], lag] - ne[r["variant"], lag],
                                          abs=1e-6)
        assert r["diff_lo"] <= r["diff"] <= r["diff_hi"]
    assert (out / "gains.csv").is_file() and "own gain" in (out / "summary.md").read_text()


def test_targets_before_and_after_each_adapter(probe):
    out, res = probe
    c = res["calibration"]
    assert set(c["arm"]) == {"kd_adapter", "kd_aux_adapter", "kd_aux_adapter_separate"}
    assert set(c["rows_of"]) == {"train", "eval"}
    for _, g in c.groupby(["lag", "rows_of"]):
        # the teacher's targets do not depend on the adapter: one value for every arm
        assert g["teacher_calibration"].nunique() == 1 and g["rows"].nunique() == 1
        assert (g["adapted_calibration"] != g["teacher_calibration"]).all()
    for arm in ("kd_adapter", "kd_aux_adapter", "kd_aux_adapter_separate"):
        assert (out / f"learned_map_{arm}.png").read_bytes()[:4] == b"\x89PNG"


def test_a_rerun_retrains_an_arm_whose_knobs_changed(run, probe, tmp_path):
    """records.jsonl keeps each arm's knobs; when the run's search has chosen others since, a
    rerun trains that arm again (a resumed probe must not keep figures of old choices), and
    source.json records which tuning.csv the knobs came from. (On a copy of the probe's output:
    the module's other tests read the shared one, in whatever order they run.)"""

    out = tmp_path / "probe"
    shutil.copytree(probe[0], out)
    path = out / "records.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    stale = next(r for r in lines if r["arm"] == "kd" and r["lag"] == 0)
    knobs = dict(stale["params"])
    stale["params"] = {**knobs, "kd_weight": 9.0}  # as if chosen by an earlier search
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    main(["--run", str(run), "--out", str(out), "--arms", "kd"])
    after = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(after) == len(lines) + 1  # only the changed arm, only its one seed and lag
    assert after[-1]["key"] == stale["key"] and after[-1]["params"] == knobs
    assert json.loads((out / "source.json").read_text()) == {"tuning_sha256":
                                                             RunDir(run).tuning_digest()}

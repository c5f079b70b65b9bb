"""The transfer-scaling study (``studies/scaling_*.py``): its config and each point's overrides,
the teacher-data multiples of the shipped config, the rank agreement, and the page rendered from
a small fake set of finished run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.run_dir.results_schema import RESULT_COLUMNS
from gemkd.experiments.spec.load import load_spec
from gemkd.transfer.errors import ConfigError
from studies.scaling_points import check_student_rows, read_point, teacher_share
from studies.scaling_rank import rank_agreement, tau_b_rows
from studies.scaling_study import ROOT, load_config, main, run_order

GOOD = {"base": "experiments/benchmark.yaml", "teacher_days": [1, 4, 16], "window_cap": 4,
        "sets": {"teacher_days": 16, "student_days": [16, 18], "eval_days": [18, 22],
                 "data.overrides.n_days": 22, "variants": ["baseline", "kd", "kd_repr"]}}


def _config(tmp_path: Path, **change) -> Path:
    raw = {**GOOD, "out": str(tmp_path / "runs"), "markdown": str(tmp_path / "SCALING.md"),
           **change}
    path = tmp_path / "scaling.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_config_and_point_overrides(tmp_path):
    cfg = load_config(_config(tmp_path))
    assert cfg.teacher_days == (1, 4, 16) and cfg.end == 16
    assert run_order(cfg.teacher_days) == [1, 16, 4]
    sets = dict(s.split("=", 1) for s in cfg.point_sets(4))
    assert sets["teacher_stream_start"] == "12" and sets["teacher_window_days"] == "4"
    assert sets["teacher_protocol"] == "streaming"
    assert sets["student_days"] == "[16, 18]" and sets["variants"] == "[baseline, kd, kd_repr]"
    one = dict(s.split("=", 1) for s in cfg.point_sets(1))
    assert one["teacher_stream_start"] == "15" and one["teacher_window_days"] == "1"
    # each point's run is named by it: its report.md is titled scaling_d<D>
    assert (sets["name"], one["name"]) == ("scaling_d4", "scaling_d1")
    assert load_spec(cfg.base, cfg.point_sets(16)).name == "scaling_d16"
    assert cfg.run_dir(16) == tmp_path / "runs" / "d16"


@pytest.mark.parametrize("change, key", [
    ({"teacher_days": [4, 1]}, "teacher_days"),
    ({"teacher_days": [1]}, "teacher_days"),
    ({"teacher_days": [1, 32]}, "teacher_days"),
    ({"window_cap": 0}, "window_cap"),
    ({"sets": {**GOOD["sets"], "teacher_stream_start": 3}}, "sets.teacher_stream_start"),
    ({"sets": {**GOOD["sets"], "name": "x"}}, "sets.name"),
    ({"sets": {"student_days": [16, 18]}}, "sets.teacher_days"),
    ({"base": "experiments/nope.yaml"}, "base"),
    ({"points": 3}, "points"),
])
def test_config_errors_name_the_key(tmp_path, change, key):
    path = _config(tmp_path, **change)
    with pytest.raises(ConfigError, match=f"{path}: {key}: "):
        load_config(path)
    assert main(["--config", str(path), "--report-only"]) == 2


def test_shipped_config_grows_only_the_teacher():
    """Each point of studies/scaling.yaml is a valid spec whose streaming teacher sees D days
    ending where the student starts; the student's days, domain and world are the same."""
    cfg = load_config(ROOT / "studies/scaling.yaml")
    assert cfg.teacher_days[-1] >= 16 * cfg.teacher_days[0]
    specs = {d: load_spec(cfg.base, cfg.point_sets(d)) for d in cfg.teacher_days}
    for d, spec in specs.items():
        assert plan_run(spec).seen[0] == (cfg.end - d, cfg.end)
        assert spec.teacher_window(0) == (cfg.end - min(d, cfg.window_cap), cfg.end)
        assert spec.lags == [0]
    first = specs[cfg.teacher_days[0]]
    for spec in specs.values():
        assert (spec.student_days, spec.eval_days, spec.student_domain, spec.data) == \
            (first.student_days, first.eval_days, first.student_domain, first.data)
    assert len(first.data.seeds) >= 3


@pytest.mark.slow
def test_shipped_config_teacher_is_at_least_d_times_the_student_on_average(tmp_path):
    """The shipped points are at least 1x, 4x, 16x the student's rows on average over the
    worlds: one teacher day (every domain) is at least the student's days of its domain, mean
    over the worlds (each world draws its own domain mix, so a world's multiple varies: the page
    states the range). Generates the config's worlds."""
    from gemkd.experiments.run.data_ratio import rows_in
    from gemkd.experiments.run.data_sources import data_plan
    from gemkd.transfer.data.schema import day_range

    cfg = load_config(ROOT / "studies/scaling.yaml")
    specs = {d: load_spec(cfg.base, cfg.point_sets(d)) for d in cfg.teacher_days}
    first = specs[cfg.teacher_days[0]]
    ratios: dict[int, list[float]] = {d: [] for d in specs}
    for world in first.data.seeds:
        plan = data_plan(first, world)
        assert plan.make is not None
        plan.make(tmp_path / f"w{world}")
        student = rows_in(tmp_path / f"w{world}", day_range(first.student_days),
                          [first.student_domain] if first.student_domain else None)
        assert 0 < student < rows_in(tmp_path / f"w{world}", day_range(first.student_days))
        for d, spec in specs.items():
            ratios[d].append(rows_in(tmp_path / f"w{world}", plan_run(spec).seen[0]) / student)
    for d, r in ratios.items():
        assert np.mean(r) >= d, (d, r)
        assert r == pytest.approx([d * x for x in ratios[1]])  # d days of the same traffic


# --- the rank agreement ---------------------------------------------------------------------

def _deltas(means: dict[str, float], noise: float, seed: int, worlds=(0, 1, 2), seeds=(0, 1)):
    rng = np.random.default_rng(seed)
    idx = pd.MultiIndex.from_product([worlds, seeds], names=["world", "seed"])
    return pd.DataFrame({v: m + noise * rng.normal(size=len(idx)) for v, m in means.items()},
                        index=idx)


def test_rank_agreement_same_and_reversed_orders():
    means = {"baseline": 0.0, "kd": 0.02, "kd_repr": 0.04, "full": 0.03, "hier": 0.01}
    same = rank_agreement(_deltas(means, 0.0, 0), _deltas({k: 2 * v for k, v in means.items()},
                                                          0.0, 1), n_boot=200)
    assert same.tau == pytest.approx(1.0) and same.rho == pytest.approx(1.0)
    assert (same.tau_lo, same.tau_hi) == pytest.approx((1.0, 1.0))
    assert (same.p_positive, same.same_best) == (1.0, 1.0)
    assert same.order_small == ["kd_repr", "full", "kd", "hier", "baseline"]
    assert all(t == pytest.approx(1.0) for t in same.per_world.values())
    rev = rank_agreement(_deltas(means, 0.0, 0), _deltas({k: -v for k, v in means.items()},
                                                         0.0, 1), n_boot=200)
    assert rev.tau == pytest.approx(-1.0) and rev.tau_hi == pytest.approx(-1.0, abs=1e-12)
    assert rev.p_positive == 0.0 and rev.same_best == 0.0


def test_rank_agreement_matches_scipy_and_widens_with_noise():
    means = {"a": 0.0, "b": 0.01, "c": 0.02, "d": 0.03}
    small, large = _deltas(means, 0.02, 0), _deltas({"a": 0.0, "b": 0.02, "c": 0.01, "d": 0.03},
                                                    0.02, 1)
    ra = rank_agreement(small, large, n_boot=500, seed=3)
    assert ra.tau == pytest.approx(stats.kendalltau(small.mean(), large.mean()).statistic)
    assert ra.tau_lo <= ra.tau <= ra.tau_hi and ra.tau_lo < ra.tau_hi
    assert ra.n_units == 6 and ra.n_boot == 500
    again = rank_agreement(small, large, n_boot=500, seed=3)
    assert (again.tau_lo, again.tau_hi) == (ra.tau_lo, ra.tau_hi)  # seeded
    # only the (world, seed) rows both points have are paired
    assert rank_agreement(small, large.drop(index=(2, 1)), n_boot=50).n_units == 5
    with pytest.raises(ValueError, match="at least 3 variants"):
        rank_agreement(small[["a", "b"]], large[["a", "b"]])


def test_tau_b_rows_is_scipys_with_ties():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, size=(200, 5)).astype(float)  # many ties
    b = rng.integers(0, 3, size=(200, 5)).astype(float)
    a[0], b[1] = 1.0, 2.0  # constant rows: no ranking, nan
    mine = tau_b_rows(a, b)
    ref = np.array([stats.kendalltau(x, y).statistic for x, y in zip(a, b, strict=True)])
    assert np.isnan(mine[:2]).all() and np.isnan(ref[:2]).all()
    np.testing.assert_allclose(mine[2:], ref[2:], rtol=1e-12)


# --- the page from fake run directories -----------------------------------------------------

VARIANTS = ["baseline", "kd", "kd_repr"]


def _fake_run(path: Path, days: int, student_rows: dict[int, int], gains: dict[str, float],
              ne_teacher: float) -> None:
    """A finished point: spec, teacher_data.json, results.csv, intervals.csv, phases.json."""
    path.mkdir(parents=True)
    (path / "spec.yaml").write_text(yaml.safe_dump({
        "student_domain": "stories", "student_days": [16, 18], "eval_days": [18, 22],
        "seeds": [0, 1], "tuning": {"trials": 4}, "data": {
            "preset": "base", "overrides": {"n_users": 800, "examples_per_day": 12000,
                                            "n_days": 22}},
        "student": {"class_path": "mlp"}}))
    (path / "teacher_data.json").write_text(json.dumps({str(w): {"0": {
        "protocol": "streaming", "teacher_days": [16 - days, 16], "teacher_rows": days * 12000,
        "student_days": [16, 18], "student_rows": n, "ratio": days * 12000 / n}}
        for w, n in student_rows.items()}))
    rows = []
    for w in student_rows:
        for seed in (0, 1):
            for v in VARIANTS:
                ne = 0.90 - gains.get(v, 0.0) + 0.001 * (seed - 0.5) + 0.002 * w
                row = dict.fromkeys(RESULT_COLUMNS, 0.0)
                row.update(variant=v, seed=seed, world=w, domain="stories", task="click",
                           teacher_lag_days=0, ne=ne, ne_baseline=0.90 + 0.002 * w,
                           ne_teacher=ne_teacher, ne_oracle=0.70, ne_feature_oracle=0.8,
                           delta_ne=gains.get(v, 0.0), auc=0.7, calibration=1.0)
                rows.append(row)
    pd.DataFrame(rows)[RESULT_COLUMNS].to_csv(path / "results.csv", index=False)
    iv = []
    for v in VARIANTS[1:]:
        g, k = gains[v], gains[v] - gains["kd"]
        iv.append({"teacher_lag_days": 0, "domain": "stories", "task": "click", "variant": v,
                   "delta_ne": g, "delta_ne_lo": g - 0.005, "delta_ne_hi": g + 0.005,
                   "vs_kd": k, "vs_kd_lo": k - 0.004, "vs_kd_hi": k + 0.004,
                   "transfer_ratio": 0.5, "tr_lo": 0.4, "tr_hi": 0.6, "n_worlds": 3,
                   "gain_verdict": "real gain" if g > 0.005 else "not resolved",
                   "kd_verdict": "beats KD" if k > 0.004 else "not resolved"})
    pd.DataFrame(iv).to_csv(path / "intervals.csv", index=False)
    (path / "phases.json").write_text(json.dumps({"steps": 60.0 * days, "tuning": 120.0}))


def test_page_from_fake_runs(tmp_path):
    cfg = load_config(_config(tmp_path))
    rows = {0: 10000, 1: 12000, 2: 8000}
    _fake_run(cfg.run_dir(1), 1, rows, {"kd": 0.010, "kd_repr": 0.012}, 0.88)
    _fake_run(cfg.run_dir(16), 16, rows, {"kd": 0.030, "kd_repr": 0.020}, 0.80)
    assert main(["--config", str(cfg.path), "--report-only", "--command", "make scaling"]) == 0
    text = cfg.markdown.read_text()
    assert "**Incomplete:** the points D = [4] have not finished" in text
    assert "Generated by `make scaling`" in text
    assert "streams days [16, 18) of `stories` and is evaluated on [18, 22)" in text
    # the student's rows per world, the same at both points; the multiples per world
    assert text.count("| 10,000, 12,000, 8,000 |") == 2
    assert "| D = 16 | [0, 16) | 192,000, 192,000, 192,000 |" in text
    assert "| 19.7× (16.00–24.00) | 4 days |" in text  # mean, the range by world
    # ΔNE with the report's interval and verdict; the teacher's share of the oracle gap
    assert "+0.0300 [+0.0250, +0.0350] **✓**" in text
    share = np.mean([(0.90 + 0.002 * w - 0.80) / (0.90 + 0.002 * w - 0.70) for w in rows])
    assert f"{100 * share:.1f} % ±" in text
    # kd_repr is ahead of KD at the small point and behind it at the large: one pair of three
    # swaps, tau = (2 - 1) / 3 in every world and every resample (no seed noise)
    assert ("- ΔNE(kd_repr) − ΔNE(KD): +0.0020 [-0.0020, +0.0060] at D = 1 → -0.0100 "
            "[-0.0140, -0.0060] at D = 16") in text
    assert "at D = 1 kd_repr, kd, baseline; at D = 16 kd, kd_repr, baseline" in text
    assert "Kendall's tau between the two orders: +0.33 [+0.33, +0.33]**" in text
    assert "world 0 +0.33, world 1 +0.33, world 2 +0.33" in text
    assert "1 of 1 the same (kd_repr: not resolved → not resolved)" in text
    assert "The best variant is the same at both points in 0 % of the resamples" in text
    assert ("**Finding: the smallest teacher's order of the methods agrees with the largest's "
            "more than chance would** (tau +0.33, the interval above 0), with a different best "
            "variant (kd_repr → kd).") in text
    assert "| D = 16 | 16.0 | 2.0 | 18.0 |" in text  # minutes per phase
    assert ("- not the sizes: ΔNE changed by +0.0200 (kd), +0.0080 (kd_repr) from D = 1 to "
            "D = 16; every gain grew with the teacher") in text
    assert ("- D = 1 → 16 (1.2× → 19.7×): the teacher's share of the oracle gap +39.6 "
            "points; ΔNE +0.0200 (kd), +0.0080 (kd_repr).") in text
    assert "- not the verdicts: no comparison against KD is resolved after Holm at either" in text
    assert "the transfer ratio is 0.50 for KD and 0.50 (1.0×) for kd_repr" in text
    for png in ("scaling_curves.png", "scaling_ranks.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / png).stat().st_size > 5000


def test_points_read_back_and_student_rows_checked(tmp_path, capsys):
    cfg = load_config(_config(tmp_path))
    _fake_run(cfg.run_dir(1), 1, {0: 100, 1: 90, 2: 80}, {"kd": 0.01, "kd_repr": 0.02}, 0.85)
    _fake_run(cfg.run_dir(4), 4, {0: 100, 1: 91, 2: 80}, {"kd": 0.01, "kd_repr": 0.02}, 0.85)
    a, b = (read_point(d, cfg.run_dir(d), "stories", "click") for d in (1, 4))
    assert a.multiple == pytest.approx(np.mean([12000 / 100, 12000 / 90, 12000 / 80]))
    sh = teacher_share(a)
    assert sh.loc[0, "share"] == pytest.approx((0.90 - 0.85) / (0.90 - 0.70))
    with pytest.raises(ConfigError, match=r"world 1: the student's rows differ between points"):
        check_student_rows([a, b])
    assert main(["--config", str(cfg.path), "--report-only"]) == 2
    assert "world 1: the student's rows differ" in capsys.readouterr().err
    assert not cfg.markdown.exists()
    # the same rows from other worlds (another data step) are not the same student data
    (cfg.run_dir(4) / "teacher_data.json").write_text(
        (cfg.run_dir(1) / "teacher_data.json").read_text())
    for d, key in ((1, "aaaa"), (4, "bbbb")):
        (cfg.run_dir(d) / "cache" / f"data-{key}").mkdir(parents=True)
        (cfg.run_dir(d) / "cache" / f"data-{key}" / "DONE").touch()
    a, b = (read_point(d, cfg.run_dir(d), "stories", "click") for d in (1, 4))
    with pytest.raises(ConfigError, match="D = 1: data-aaaa; D = 4: data-bbbb"):
        check_student_rows([a, b])
    with pytest.raises(ConfigError, match="no intervals.csv"):
        (cfg.run_dir(4) / "intervals.csv").unlink()
        read_point(4, cfg.run_dir(4), "stories", "click")

"""studies/teacher_aging.py (with aging_study.py and aging_report.py): the slope and its
interval on constructed cases, the table's figures against the library's metrics, and one
end-to-end run on the tiny world."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gemkd.transfer.metrics.bootstrap import WorldSums, ne_point
from studies.aging_study import (
    EvalRows,
    Run,
    aging_curve,
    aging_study,
    evaluate_rows,
    ls_slope,
    slope_with_interval,
)
from studies.teacher_aging import main
from studies.teacher_eval import evaluate_teacher


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_slope_is_the_least_squares_fit():
    ages = [0, 2, 4, 6]
    y = 0.9 + 0.01 * np.asarray(ages, float)
    assert ls_slope(ages, y) == pytest.approx(0.01, abs=1e-12)
    # replicates that only shift the line keep the slope: the interval is the point
    reps = y[None] + np.linspace(-0.05, 0.05, 40)[:, None]
    s, lo, hi = slope_with_interval(ages, y, reps)
    assert (s, lo, hi) == pytest.approx((0.01, 0.01, 0.01), abs=1e-12)
    # replicates with slopes spread over [0, 0.02]: an interval inside that range around 0.01
    tilt = np.linspace(-0.01, 0.01, 201)
    reps = y[None] + tilt[:, None] * (np.asarray(ages, float) - 3)[None]
    s, lo, hi = slope_with_interval(ages, y, reps)
    assert 0 <= lo < s < hi <= 0.02
    assert ls_slope([0, 1, 3], np.array([1.0, 2.0, 1.0])) == pytest.approx(
        np.polyfit([0, 1, 3], [1.0, 2.0, 1.0], 1)[0])
    assert np.isnan(ls_slope(ages, np.array([1.0, np.nan, 1.0, 1.0])))
    assert np.isnan(ls_slope([1], np.array([1.0])))


def _rows(logit_shift: float, rng_seed: int = 0, n: int = 600) -> EvalRows:
    rng = np.random.default_rng(rng_seed)  # the same rows for every shift: paired
    user = rng.integers(0, 40, n)
    domain = rng.integers(0, 2, n)
    score = rng.normal(size=(n, 1))
    labels = (rng.random((n, 1)) < 1 / (1 + np.exp(-(score - 1.5)))).astype(float)
    return EvalRows(score - 1.5 + logit_shift, labels, user, domain, np.arange(n), ("click",),
                    ("a", "b"))


def test_study_matches_the_library_and_pairs_the_control():
    rates = {"all": {"click": 0.2}, "b": {"click": 0.25}}
    runs = [Run(m, age, s, _rows(shift * age + 0.01 * s), rates)
            for m, shift in (("gem", 0.5), ("mlp", 0.25)) for age in (0, 1, 2) for s in (0, 1)]
    curve, slopes = aging_study(runs, groups=["all", "b"], samples=100, seed=3)
    assert len(curve) == 2 * 3 * 2  # model × age × group (one task)
    # NE against the training rate: the library's WorldSums (rows as clusters), seed by seed
    r = runs[0].rows
    got = curve[(curve.model == "gem") & (curve.age == 0) & (curve.group == "all")].iloc[0]
    want = np.mean([ne_point(WorldSums(r.user, r.domain, _loss(x.rows)[None],
                                       np.ones_like(r.labels), r.labels, np.array([0.2]), 2)
                             )[0, -1, 0] for x in runs[:2]])
    assert got["ne"] == pytest.approx(want, rel=1e-9)
    assert got["calibration"] == pytest.approx(
        np.mean([(1 / (1 + np.exp(-x.rows.logits))).sum() / r.labels.sum() for x in runs[:2]]))
    assert got["ne_lo"] <= got["ne"] <= got["ne_hi"]
    # domain b divides by its own rate
    b = curve[(curve.model == "gem") & (curve.age == 0) & (curve.group == "b")].iloc[0]
    rows_b = r.domain == 1
    assert b["ne"] == pytest.approx(np.mean([_loss(x.rows)[rows_b].mean() / _h(0.25)
                                             for x in runs[:2]]), rel=1e-9)
    # the slope is the fit of the table's rows; the difference is the difference of slopes
    ne = slopes[(slopes.group == "all") & (slopes.metric == "ne")].set_index("model")["slope"]
    for m in ("gem", "mlp"):
        c = curve[(curve.model == m) & (curve.group == "all")]
        assert ne[m] == pytest.approx(np.polyfit(c["age"], c["ne"], 1)[0], rel=1e-9)
    assert ne["gem − mlp"] == pytest.approx(ne["gem"] - ne["mlp"], rel=1e-9)
    assert ne["gem"] > ne["mlp"] > 0  # logits drift further from the truth with age for gem
    assert aging_curve(runs, groups=["all"], samples=10).shape[0] == 2 * 3
    with pytest.raises(ValueError, match="not paired"):
        aging_study([*runs, Run("x", 0, 0, _rows(0.0, n=599), rates)])


def test_levels_pair_two_models_at_each_age():
    """A second model (e.g. GEM base against GEM small) on the same windows: its paired
    difference at each age is the difference of the table's rows, with an interval."""
    rates = {"all": {"click": 0.2}}
    runs = [Run(m, age, s, _rows(shift + 0.01 * s), rates)
            for m, shift in (("gem", 0.0), ("gem_base", 2.0)) for age in (0, 2) for s in (0, 1)]
    curve, _, levels = aging_study(runs, samples=100, seed=1, control="gem", levels=True)
    ne = levels[levels.metric == "ne"].set_index("age")
    for age in (0, 2):
        c = curve[curve.age == age].set_index("model")["ne"]
        assert ne.loc[age, "diff"] == pytest.approx(c["gem_base"] - c["gem"], rel=1e-9)
        assert ne.loc[age, "lo"] <= ne.loc[age, "diff"] <= ne.loc[age, "hi"]
        assert ne.loc[age, "lo"] > 0  # a logit shift of 2 is worse, beyond the noise
    assert set(ne["model"]) == {"gem_base − gem"}
    assert len(aging_study(runs, samples=10, control="gem")) == 2  # levels only when asked


def _loss(rows: EvalRows) -> np.ndarray:
    p = 1 / (1 + np.exp(-rows.logits))
    return -(rows.labels * np.log(p) + (1 - rows.labels) * np.log1p(-p))


def _h(p: float) -> float:
    return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))


TINY_MODEL = ["max_seq_len=16", "batch_size=256", "model.d=8", "model.n_layers=1",
              "model.mlp_width=32", "model.trunk_dim=32", "model.head_hidden=16", "mlp.hidden=16"]


def test_benchmark_on_the_tiny_world(tiny_data, tmp_path, one_thread):
    out = tmp_path / "aging"
    main(["--data", str(tiny_data), "--window", "1", "--ages", "0", "1", "--eval-days", "4", "6",
          "--seeds", "0", "--threads", "1", "--bootstrap", "40", "--groups", "all", "stories",
          "--set", *TINY_MODEL, "--keep", str(out / "runs"), "--json", str(out / "a.json"),
          "--markdown", str(out / "a.md"), "--plot", str(out / "a.png")])
    res = json.loads((out / "a.json").read_text())
    assert res["windows"] == {"0": [3, 4], "1": [2, 3]}
    click = [r for r in res["curve"] if r["task"] == "click" and r["group"] == "all"]
    assert sorted((r["model"], r["age"]) for r in click) == [
        ("gem", 0), ("gem", 1), ("mlp", 0), ("mlp", 1)]
    for r in res["curve"]:
        assert np.isfinite(r["ne"]) and np.isfinite(r["auc"])
        assert r["ne_lo"] <= r["ne"] <= r["ne_hi"]
    for m in ("gem", "mlp"):
        rows = sorted((r["age"], r["ne"]) for r in click if r["model"] == m)
        slope = next(s["slope"] for s in res["slopes"] if s["model"] == m
                     and s["group"] == "all" and s["task"] == "click" and s["metric"] == "ne")
        assert slope == pytest.approx(np.polyfit(*zip(*rows, strict=True), 1)[0], rel=1e-9)
    assert any(s["model"] == "gem − mlp" for s in res["slopes"])
    # one seed: the table's NE is that checkpoint's NE by the library's own metrics
    ckpt = out / "runs" / "gem-age1-s0" / "checkpoints" / "last.ckpt"
    lib = evaluate_teacher(ckpt, tiny_data, (4, 6), {"click": click[1]["base_rate_train"]})
    gem1 = next(r for r in click if r["model"] == "gem" and r["age"] == 1)
    assert gem1["ne"] == pytest.approx(lib["ne/click/all"], rel=1e-5)
    assert gem1["auc"] == pytest.approx(lib["auc/click/all"], abs=1e-5)
    assert gem1["calibration"] == pytest.approx(lib["calibration/click/all"], rel=1e-5)
    rows = evaluate_rows(ckpt, tiny_data, (4, 6))
    assert rows.logits.shape == (len(rows.user), len(rows.tasks))
    assert "| gem | 0 |" in (out / "a.md").read_text()
    assert (out / "a.png").stat().st_size > 10_000
    # a rerun over the kept runs only evaluates: same figures for the age it keeps
    again = main(["--data", str(tiny_data), "--window", "1", "--ages", "1", "--eval-days", "4",
                  "6", "--seeds", "0", "--threads", "1", "--bootstrap", "10", "--set", *TINY_MODEL,
                  "--keep", str(out / "runs")])
    assert all(t["reused"] for t in again["timings"])
    row = next(r for r in again["curve"] if r["model"] == "gem" and r["task"] == "click")
    assert row["ne"] == pytest.approx(gem1["ne"], rel=1e-12)


def test_absent_dataset_is_skipped(tmp_path, capsys):
    assert main(["--data", str(tmp_path / "nowhere" / "data-*")]) is None
    assert "skipped" in capsys.readouterr().out


def test_paths_are_checked(tiny_data):
    with pytest.raises(SystemExit, match="do not fit"):
        main(["--data", str(tiny_data), "--window", "4", "--ages", "3", "--eval-days", "4", "6"])
    with pytest.raises(SystemExit, match="domains are"):
        main(["--data", str(tiny_data), "--window", "1", "--ages", "0", "--eval-days", "4", "6",
              "--groups", "nope"])


def test_rows_must_share_tasks():
    a = _rows(0.0)
    b = EvalRows(a.logits, a.labels, a.user, a.domain, a.example_id, ("other",), a.domains)
    rates = {"all": {"click": 0.2, "other": 0.2}}
    with pytest.raises(ValueError, match="tasks"):
        aging_study([Run("gem", 0, 0, a, rates), Run("gem", 1, 0, b, rates)])

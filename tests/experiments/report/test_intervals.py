"""Intervals, p-values and verdicts of a run directory (gemkd.experiments.report.intervals) from
per-user evaluation files built with their results.csv from the same per-example predictions;
the reference arm as an argument and ``gemkd report --pair``."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from gemkd.experiments.report.cluster_files import load_eval_sets, point_frame
from gemkd.experiments.report.intervals import (
    BEATS,
    COLUMNS,
    GAIN,
    METHOD_TEXT,
    UNRESOLVED,
    lag_intervals,
    run_intervals,
    verdict,
)
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.errors import ConfigError
from tests.experiments.report.cluster_run import make_cluster_run
from tests.experiments.report.test_report import make_results, make_run

LAGS = (0, 3)


@pytest.fixture(scope="module")
def three_worlds(tmp_path_factory) -> Path:
    return make_cluster_run(tmp_path_factory.mktemp("worlds"), worlds=(0, 1, 2), lags=LAGS)


@pytest.fixture(scope="module")
def one_world(tmp_path_factory) -> Path:
    return make_cluster_run(tmp_path_factory.mktemp("one"), worlds=(4,))


def _row(table: pd.DataFrame, variant: str, lag=0, domain="all", task="click") -> pd.Series:
    r = table[(table["variant"] == variant) & (table["teacher_lag_days"] == lag)
              & (table["domain"] == domain) & (table["task"] == task)]
    assert len(r) == 1
    return r.iloc[0]


def test_files_reproduce_results_ne(three_worlds):
    """NE from the cluster sums = RankingMetrics' NE in results.csv, row by row (incl. the
    conversion task, whose NE divides by the evaluation labels' own rate)."""
    results = RunDir(three_worlds).results()
    points = point_frame(load_eval_sets(three_worlds))
    keys = ["world", "teacher_lag_days", "variant", "seed", "domain", "task"]
    both = points.merge(results[[*keys, "ne"]], on=keys, suffixes=("", "_ref"))
    assert len(both) == len(results) == 3 * 2 * 4 * 3 * 3 * 2
    assert (both["ne"] - both["ne_ref"]).abs().max() < 1e-9


def test_point_estimates_are_means_over_worlds_of_seed_means(three_worlds):
    table = run_intervals(three_worlds).table
    res = RunDir(three_worlds).results()
    res["fm"] = res["ne_baseline"] - res["ne_teacher"]
    keys = ["teacher_lag_days", "domain", "task", "variant"]
    means = res.groupby([*keys, "world"])[["ne", "delta_ne", "fm"]].mean().groupby(keys).mean()
    for lag in LAGS:
        for domain in ("all", "d0", "d1"):
            for task in ("click", "conversion"):
                kd = means.loc[(lag, domain, task, "kd")]
                for v in ("baseline", "kd", "kd_aux", "kd_repr"):
                    r, m = _row(table, v, lag, domain, task), means.loc[(lag, domain, task, v)]
                    assert r["ne"] == pytest.approx(m["ne"], abs=1e-9)
                    assert r["delta_ne"] == pytest.approx(m["delta_ne"], abs=1e-9)
                    assert r["vs_kd"] == pytest.approx(m["delta_ne"] - kd["delta_ne"], abs=1e-9)
                    assert r["efficiency_vs_kd"] == pytest.approx(
                        m["delta_ne"] / kd["delta_ne"], rel=1e-9)
                    assert r["transfer_ratio"] == pytest.approx(m["delta_ne"] / m["fm"],
                                                                rel=1e-9)


def test_intervals_and_verdicts(three_worlds):
    iv = run_intervals(three_worlds)
    table = iv.table
    assert list(table.columns) == COLUMNS and iv.resolved and iv.worlds == [0, 1, 2]
    assert len(table) == 2 * 3 * 2 * 4 and iv.samples == 200
    for stat, lo, hi in (("ne", "ne_lo", "ne_hi"), ("delta_ne", "delta_ne_lo", "delta_ne_hi"),
                         ("vs_kd", "vs_kd_lo", "vs_kd_hi")):
        assert (table[lo] <= table[hi]).all()
        assert ((table[lo] <= table[stat] + 1e-12) & (table[stat] <= table[hi] + 1e-12)).all()
    base, kd = table[table["variant"] == "baseline"], table[table["variant"] == "kd"]
    assert (base[["delta_ne", "delta_ne_lo", "delta_ne_hi"]].abs() < 1e-12).all().all()
    assert (kd[["vs_kd", "vs_kd_lo", "vs_kd_hi"]].abs() < 1e-12).all().all()  # paired
    # KD against itself: Fieller's ends are found by bisection where Var(a − ρb) = (1 − ρ)² Var(b)
    # cancels to ~1e-16 of Var(b): the ends sit within ~1e-8 of 1
    assert (kd[["efficiency_vs_kd", "efficiency_lo", "efficiency_hi"]] - 1).abs().max().max() \
        < 1e-6
    assert (base["gain_verdict"] == "").all() and (kd["kd_verdict"] == "").all()
    assert (base["kd_verdict"] == "below KD").all()
    np.testing.assert_allclose(table["delta_ne_half_width"],
                               (table["delta_ne_hi"] - table["delta_ne_lo"]) / 2)
    np.testing.assert_allclose(table["vs_kd_half_width"],
                               (table["vs_kd_hi"] - table["vs_kd_lo"]) / 2)
    aux = table[table["variant"] == "kd_aux"]
    assert (aux["gain_verdict"] == GAIN).all() and (aux["kd_verdict"] == BEATS).all()
    assert (aux["efficiency_lo"] > 1).all() and (aux["n_worlds"] == 3).all()
    # kd_repr is KD with other noise: as good as KD, and the run says it cannot tell
    repr_ = _row(table, "kd_repr")
    assert repr_["vs_kd_lo"] < 0 < repr_["vs_kd_hi"] and repr_["kd_verdict"] == UNRESOLVED
    assert repr_["efficiency_lo"] < 1 < repr_["efficiency_hi"]


def test_worlds_agree_counts_world_signs(three_worlds):
    iv = run_intervals(three_worlds)
    bw = iv.by_world
    assert len(bw) == len(iv.table) * 3 and set(bw["n_seeds"]) == {3}
    for _, r in iv.table.iterrows():
        w = bw[(bw["teacher_lag_days"] == r["teacher_lag_days"]) & (bw["domain"] == r["domain"])
               & (bw["task"] == r["task"]) & (bw["variant"] == r["variant"])]
        assert w["ne"].mean() == pytest.approx(r["ne"], abs=1e-12)
        assert r["worlds_agree_delta_ne"] == (np.sign(w["delta_ne"])
                                              == np.sign(r["delta_ne"])).sum()
        assert r["worlds_agree_vs_kd"] == (np.sign(w["vs_kd"]) == np.sign(r["vs_kd"])).sum()


def test_a_gain_in_one_world_of_three_is_not_a_verdict(tmp_path):
    """kd_repr far better than KD in world 0, a little worse in worlds 1 and 2: the pooled
    difference is positive but only 1 of 3 worlds agrees, so it does not beat KD."""
    run = make_cluster_run(tmp_path / "r", worlds=(0, 1, 2),
                           noise={"baseline": 1.6, "kd": 0.9, "kd_repr": 1.0},
                           world_noise={0: {"kd_repr": 0.2}})
    iv = run_intervals(run)
    r = _row(iv.table, "kd_repr")
    assert r["vs_kd"] > 0 and r["worlds_agree_vs_kd"] == 1
    assert r["kd_verdict"] == UNRESOLVED
    w = iv.by_world
    w = w[(w["variant"] == "kd_repr") & (w["domain"] == "all") & (w["task"] == "click")]
    assert (w.set_index("world")["vs_kd"] > 0).tolist() == [True, False, False]


def test_verdict_rule():
    assert verdict(0.01, 0.03, "up", "down") == "up"
    assert verdict(-0.03, -0.01, "up", "down") == "down"
    assert verdict(-0.01, 0.03, "up", "down") == UNRESOLVED  # holds 0
    assert verdict(math.nan, math.nan, "up", "down") == UNRESOLVED


def test_intervals_over_worlds_are_t_intervals_of_the_world_values(three_worlds):
    """mean ± t(W − 1) · sd / √W of each world's seed-averaged value, never narrower than the
    fixed-effect interval ± t_ν · sqrt(Σ_w v_w) / W of each world's own per-seed noise (v_w: the
    between-seed variance of its paired values over S, ν their Welch–Satterthwaite df); the
    verdict is the interval's and
    agrees with the two-sided p-value; efficiency's interval holds 1 exactly when vs_kd's
    holds 0."""
    iv = run_intervals(three_worlds)
    assert iv.interval_method == "t-worlds" and iv.reference == "kd"
    assert "W − 1 degrees of freedom" in METHOD_TEXT[iv.interval_method]
    bw, table = iv.by_world, iv.table
    res = RunDir(three_worlds).results()
    kd_ne = res[res["variant"] == "kd"].set_index(
        ["teacher_lag_days", "domain", "task", "world", "seed"])["ne"]
    res = res.join(kd_ne.rename("ne_kd"), on=kd_ne.index.names)
    res["vs_kd"] = res["ne_kd"] - res["ne"]
    t2 = float(stats.t.ppf(0.975, 2))
    floored = 0
    for _, r in table[table["variant"].isin(["kd_aux", "kd_repr"])].iterrows():
        cell = ((bw["teacher_lag_days"] == r["teacher_lag_days"]) & (bw["domain"] == r["domain"])
                & (bw["task"] == r["task"]) & (bw["variant"] == r["variant"]))
        w = bw[cell]
        seeds = res[(res["teacher_lag_days"] == r["teacher_lag_days"])
                    & (res["domain"] == r["domain"]) & (res["task"] == r["task"])
                    & (res["variant"] == r["variant"])]
        for stat in ("delta_ne", "vs_kd"):
            v = seeds.groupby("world")[stat].agg(lambda x: x.var(ddof=1) / len(x)) / 9
            df = v.sum() ** 2 / (v ** 2 / 2).sum()  # Welch–Satterthwaite, 2 df per world
            fixed = float(stats.t.ppf(0.975, df)) * math.sqrt(v.sum())
            half = max(t2 * w[stat].std(ddof=1) / math.sqrt(3), fixed)
            floored += fixed > t2 * w[stat].std(ddof=1) / math.sqrt(3)
            assert r[f"{stat}_lo"] == pytest.approx(w[stat].mean() - half, abs=1e-12)
            assert r[f"{stat}_hi"] == pytest.approx(w[stat].mean() + half, abs=1e-12)
    assert floored > 0  # the floor decides some cells here: the check reaches it
    others = table[table["variant"] != "kd"]
    resolved = others["kd_verdict"] != UNRESOLVED
    assert ((others["vs_kd_p"] < 0.05) == resolved).all()
    gained = table[table["variant"] != "baseline"]
    assert ((gained["delta_ne_p"] < 0.05) == (gained["gain_verdict"] != UNRESOLVED)).all()
    assert table.loc[table["variant"] == "kd", "vs_kd_p"].isna().all()  # its own reference
    eff = others.dropna(subset=["efficiency_lo"])
    assert len(eff) and ((eff["efficiency_lo"] > 1) == (eff["vs_kd_lo"] > 0)).all()
    assert ((eff["efficiency_hi"] < 1) == (eff["vs_kd_hi"] < 0)).all()


def test_one_world_holds_users_and_seeds(one_world, tmp_path):
    iv = run_intervals(one_world)
    assert iv.interval_method == "pivot-seeds" and (iv.table["n_worlds"] == 1).all()
    t = iv.table[iv.table["variant"] != "kd"]
    assert t["vs_kd_lo"].notna().all() and (t["vs_kd_lo"] <= t["vs_kd"]).all()
    assert ((t["vs_kd_p"] < 0.05) == (t["kd_verdict"] != UNRESOLVED)).all()
    one_seed = make_cluster_run(tmp_path / "s", worlds=(4,), seeds=(0,))
    iv1 = run_intervals(one_seed)
    assert iv1.interval_method == "users-only" and "not in them" in METHOD_TEXT["users-only"]
    assert iv1.table["vs_kd_lo"].notna().any()


def test_the_reference_arm_is_an_argument(three_worlds):
    """vs_kd and efficiency against another arm, labelled with its name; against the baseline
    vs_kd is ΔNE itself (the --pair kd_aux baseline case)."""
    sets = [es for es in load_eval_sets(three_worlds) if es.lag == 0]
    kd, _ = lag_intervals(sets, 200, 0)
    ref, _ = lag_intervals(sets, 200, 0, reference="kd_repr")
    a, b = _row(kd, "kd_aux"), _row(kd, "kd_repr")
    r = _row(ref, "kd_aux")
    assert r["vs_kd"] == pytest.approx(a["delta_ne"] - b["delta_ne"])
    assert r["kd_verdict"] in ("beats kd_repr", "below kd_repr", UNRESOLVED)
    assert _row(ref, "kd_repr")["kd_verdict"] == "" and _row(ref, "kd")["kd_verdict"] != ""
    base, _ = lag_intervals(sets, 200, 0, reference="baseline")
    for v in ("kd", "kd_aux"):
        got, want = _row(base, v), _row(kd, v)
        assert (got["vs_kd"], got["vs_kd_lo"], got["vs_kd_hi"], got["vs_kd_p"]) == pytest.approx(
            (want["delta_ne"], want["delta_ne_lo"], want["delta_ne_hi"], want["delta_ne_p"]))
        assert got["kd_verdict"] == want["gain_verdict"].replace("real gain", "beats baseline")
    missing, _ = lag_intervals(sets, 200, 0, reference="nope")
    assert (missing["kd_verdict"] == "").all() and missing["vs_kd"].isna().all()


def test_same_seed_same_intervals_other_seed_others(one_world, tmp_path):
    a, b = run_intervals(one_world), run_intervals(one_world)
    pd.testing.assert_frame_equal(a.table, b.table)
    other = tmp_path / "other"
    shutil.copytree(one_world, other)
    spec = yaml.safe_load((other / "spec.yaml").read_text())
    spec["bootstrap"] = {"samples": 300, "seed": 1}
    (other / "spec.yaml").write_text(yaml.safe_dump(spec))
    c = run_intervals(other)
    assert c.samples == 300 and c.seed == 1
    assert np.allclose(a.table["ne"], c.table["ne"])  # points do not depend on the draws
    assert not np.allclose(a.table["ne_lo"], c.table["ne_lo"])
    del spec["bootstrap"]  # an older spec: the defaults (1000 resamples, seed 0)
    (other / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert run_intervals(other).samples == 1000


def test_one_world_and_results_without_world(tmp_path):
    run = make_cluster_run(tmp_path / "r", worlds=(0,), world_column=False)
    assert "world" not in pd.read_csv(run / "results.csv").columns
    iv = run_intervals(run)
    assert iv.resolved and iv.worlds == [0] and (iv.table["n_worlds"] == 1).all()
    assert _row(iv.table, "kd_aux")["gain_verdict"] == GAIN


def test_tr_is_against_gem_and_other_teachers_are_ignored(one_world, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(one_world, run)
    folder = run / "clusters" / "world=4" / "lag=0"
    with np.load(folder / "teacher__gem.npz") as f:
        arrays = {k: f[k] for k in f.files}
    np.savez(folder / "teacher__domain_fm.npz", **{**arrays, "loss": arrays["loss"] * 0.5})
    pd.testing.assert_frame_equal(run_intervals(run).table, run_intervals(one_world).table)
    (folder / "teacher__gem.npz").unlink()
    table = run_intervals(run).table
    assert table["transfer_ratio"].isna().all() and table["delta_ne"].notna().all()


def test_files_of_another_evaluation_are_refused(one_world, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(one_world, run)
    path = run / "clusters" / "world=4" / "lag=0" / "kd__seed1.npz"
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    np.savez(path, **{**arrays, "user_id": arrays["user_id"] + 1})
    with pytest.raises(ConfigError, match=r"kd__seed1\.npz: array 'user_id' differs"):
        run_intervals(run)
    np.savez(path, **{k: v for k, v in arrays.items() if k != "pos"})
    with pytest.raises(ConfigError, match="missing array 'pos'"):
        run_intervals(run)
    np.savez(path, **arrays)
    res = pd.read_csv(run / "results.csv")
    res.loc[0, "ne"] += 0.01
    res.to_csv(run / "results.csv", index=False)
    with pytest.raises(ConfigError, match="differs from results.csv in 1 row"):
        run_intervals(run)


def test_a_run_without_clusters_has_points_and_no_intervals(tmp_path):
    run = make_run(tmp_path / "old", make_results(), extras=False)
    iv = run_intervals(run)
    assert not iv.resolved and iv.worlds == [0]
    table = iv.table
    assert list(table.columns) == COLUMNS
    for col in ("ne_lo", "delta_ne_hi", "vs_kd_lo", "efficiency_hi", "tr_lo",
                "delta_ne_half_width"):
        assert table[col].isna().all()
    kd = _row(table, "kd")
    assert kd["delta_ne"] == pytest.approx(0.0100) and kd["ne"] == pytest.approx(0.792)
    aux = _row(table, "kd_aux")
    assert aux["vs_kd"] == pytest.approx(0.0040) and aux["efficiency_vs_kd"] == pytest.approx(1.4)
    assert aux["gain_verdict"] == UNRESOLVED and aux["kd_verdict"] == UNRESOLVED
    assert kd["kd_verdict"] == "" and _row(table, "baseline")["gain_verdict"] == ""


def test_ratios_to_a_kd_gain_that_may_not_be_one_are_left_empty(tmp_path):
    """KD no better than the baseline: efficiency is empty, the paired difference is not."""
    from gemkd.experiments.report import render_report

    run = make_cluster_run(tmp_path / "r", noise={"baseline": 1.6, "kd": 1.6, "kd_aux": 0.5})
    table = run_intervals(run).table
    kd = _row(table, "kd")
    assert kd["delta_ne_lo"] < 0 < kd["delta_ne_hi"] and kd["gain_verdict"] == UNRESOLVED
    assert table[["efficiency_vs_kd", "efficiency_lo", "efficiency_hi"]].isna().all().all()
    aux = _row(table, "kd_aux")
    assert aux["kd_verdict"] == BEATS and aux["transfer_ratio"] > 0.5
    assert "**Efficiency vs KD is not defined here**" in render_report(run)


def test_paired_difference_against_any_reference(three_worlds):
    from gemkd.experiments.report.variant_pairs import paired_difference

    table = run_intervals(three_worlds).table
    # against plain KD it is the report's own vs_kd
    vs_kd = paired_difference(three_worlds, "kd_aux", "kd")
    for _, r in vs_kd.iterrows():
        ref = _row(table, "kd_aux", r["teacher_lag_days"], r["domain"], r["task"])
        assert (r["diff"], r["diff_lo"], r["diff_hi"], r["p"]) == pytest.approx(
            (ref["vs_kd"], ref["vs_kd_lo"], ref["vs_kd_hi"], ref["vs_kd_p"]))
        assert r["verdict"] == ref["kd_verdict"]
    # against another variant: the difference of the two ΔNEs, per world and pooled
    pair = paired_difference(three_worlds, "kd_aux", "kd_repr")
    r = pair[(pair["teacher_lag_days"] == 0) & (pair["domain"] == "all")
             & (pair["task"] == "click")].iloc[0]
    a, b = _row(table, "kd_aux"), _row(table, "kd_repr")
    assert r["diff"] == pytest.approx(a["delta_ne"] - b["delta_ne"])
    assert r["diff_lo"] < r["diff"] < r["diff_hi"] and len(r["per_world"]) == 3
    assert r["verdict"] in ("beats kd_repr", "below kd_repr", UNRESOLVED)
    with pytest.raises(ConfigError, match="no variant 'nope'"):
        paired_difference(three_worlds, "nope", "kd")
    with pytest.raises(ConfigError, match="a variant against itself"):
        paired_difference(three_worlds, "kd", "kd")


def test_pair_against_the_baseline_prints_numbers(one_world, capsys):
    """Trap (e): ``gemkd report RUN --pair kd_aux baseline`` printed ``+nan [+nan, +nan]`` and
    exited 0 (the baseline stood in for KD, so no ΔNE was left to subtract)."""
    from gemkd.experiments.cli import main

    assert main(["report", str(one_world), "--pair", "kd_aux", "baseline"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6 and "nan" not in " ".join(lines)
    table = run_intervals(one_world).table
    want = _row(table, "kd_aux")
    line = next(ln for ln in lines if ln.startswith("lag 0 all click: kd_aux - baseline"))
    assert f"ΔNE {want['delta_ne']:+.4f} [{want['delta_ne_lo']:+.4f}, " in line
    # a resolved pair is a lead, not a primary verdict: the line says its interval is unadjusted
    assert line.endswith(f"beats baseline (worlds 4: {want['delta_ne']:+.4f}, exploratory: 95 % "
                         "unadjusted)")


def test_a_pair_that_cannot_be_compared_says_so_and_fails(tmp_path, capsys):
    """kd_aux evaluated in one world of two: no interval over worlds, so no verdict is printed
    for it, and the command exits non-zero; a variant against itself is an error."""
    from gemkd.experiments.cli import main

    run = make_cluster_run(tmp_path / "r", worlds=(0, 1))
    for path in (run / "clusters" / "world=1" / "lag=0").glob("kd_aux__seed*.npz"):
        path.unlink()
    res = pd.read_csv(run / "results.csv")
    res[~((res["variant"] == "kd_aux") & (res["world"] == 1))].to_csv(run / "results.csv",
                                                                       index=False)
    assert main(["report", str(run), "--pair", "kd_aux", "kd"]) == 2
    captured = capsys.readouterr()
    assert "cannot compare (no interval" in captured.out and "nan" not in captured.out
    assert "6 of 6 rows cannot be compared" in captured.err
    assert main(["report", str(run), "--pair", "kd", "baseline"]) == 0  # both in both worlds
    assert "nan" not in capsys.readouterr().out
    assert main(["report", str(run), "--pair", "kd", "kd"]) == 2
    assert "a variant against itself" in capsys.readouterr().err

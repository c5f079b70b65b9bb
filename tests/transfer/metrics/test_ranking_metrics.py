"""RankingMetrics: NE, AUC and calibration per task × domain against numpy references."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from gemkd.transfer.metrics import (
    Calibration,
    NormalizedEntropy,
    RankingMetrics,
    SafeBinaryAUROC,
    to_frame,
)
from tests.transfer.metrics.reference import (
    np_auc,
    np_entropy,
    np_logloss_logits,
    np_sigmoid,
    same,
    t,
)

LN2 = math.log(2.0)
H25 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.5623351446...

# ---- RankingMetrics ----------------------------------------------------------------------------

TASKS = ["ctr", "cvr"]
DOMAINS = ["feed", "story", "reels", "search"]  # "search" gets no rows


def make_batch(n: int = 240, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, 2, generator=g) * 2 - 1
    labels = (torch.rand(n, 2, generator=g) < torch.sigmoid(logits)).float()
    domain = torch.randint(0, 3, (n,), generator=g)
    labels[domain == 2, 1] = 0.0  # cvr has no positives in "reels"
    mask = torch.rand(n, 2, generator=g) < 0.8
    mask[:, 0] = True
    return logits, labels, domain, mask


def reference(logits, labels, domain, mask, base_rates, domain_rates=None) -> dict[str, float]:
    """Per (task, domain) cell, straight from the definitions, with numpy: p̄ is the domain's
    own rate where ``domain_rates`` has one, else the task's, else the cell's label mean."""
    x, y, dom, m = (a.double().numpy() for a in (logits, labels, domain, mask))
    m = m.astype(bool)
    out = {}
    for ti, task in enumerate(TASKS):
        for di, name in enumerate([*DOMAINS, "all"]):
            sel = m[:, ti] & ((dom == di) if name != "all" else True)
            xs, ys = x[sel, ti], y[sel, ti]
            n, pos = len(ys), ys.sum()
            rate = base_rates.get(task, pos / n if n else math.nan)
            if name != "all" and (domain_rates or {}).get(task, {}).get(name) is not None:
                rate = domain_rates[task][name]
            ok = n > 0 and 0 < rate < 1
            out[f"ne/{task}/{name}"] = (
                np_logloss_logits(xs, ys).mean() / np_entropy(rate) if ok else math.nan
            )
            out[f"calibration/{task}/{name}"] = np_sigmoid(xs).sum() / pos if pos else math.nan
            out[f"auc/{task}/{name}"] = np_auc(xs, ys)
            out[f"n/{task}/{name}"] = float(n)
            out[f"positives/{task}/{name}"] = float(pos)
    return out


def assert_matches(result: dict[str, float], expected: dict[str, float], tol: float = 1e-9):
    assert set(result) == set(expected)
    bad = {k: (result[k], expected[k]) for k in expected if not same(result[k], expected[k], tol)}
    assert not bad


@pytest.mark.parametrize("base_rates", [{}, {"ctr": 0.4, "cvr": 0.05}, {"cvr": 0.05}])
def test_ranking_metrics_match_reference(base_rates):
    logits, labels, domain, mask = make_batch()
    rm = RankingMetrics(TASKS, 4, DOMAINS, base_rates=base_rates)
    rm.update(logits, labels, domain, mask)
    result = rm.compute()
    assert_matches(result, reference(logits, labels, domain, mask, base_rates), tol=1e-6)


@pytest.mark.parametrize("base_rates", [{}, {"ctr": 0.4, "cvr": 0.05}])
def test_each_domain_row_uses_its_own_base_rate(base_rates):
    """A domain's NE divides by its own p̄; domains without one take the task's; the all row
    keeps the task's."""
    logits, labels, domain, mask = make_batch()
    domain_rates = {"ctr": {"feed": 0.3, "story": 0.6}, "cvr": {"reels": 0.02}}
    rm = RankingMetrics(TASKS, 4, DOMAINS, base_rates=base_rates,
                        domain_base_rates=domain_rates)
    rm.update(logits, labels, domain, mask)
    result = rm.compute()
    assert_matches(result, reference(logits, labels, domain, mask, base_rates, domain_rates),
                   tol=1e-6)
    plain = RankingMetrics(TASKS, 4, DOMAINS, base_rates=base_rates)
    plain.update(logits, labels, domain, mask)
    before = plain.compute()
    # the feed row's NE is rescaled by H(task p̄) / H(0.3); cells without a rate are unchanged
    feed_rate = base_rates.get("ctr", float(labels[domain == 0, 0].double().mean()))
    assert result["ne/ctr/feed"] == pytest.approx(
        before["ne/ctr/feed"] * np_entropy(feed_rate) / np_entropy(0.3), rel=1e-9)
    for key in ("ne/ctr/reels", "ne/cvr/feed", "ne/ctr/all", "ne/cvr/all", "auc/ctr/feed"):
        assert same(result[key], before[key], 1e-12)


def test_domain_base_rates_are_checked():
    with pytest.raises(ValueError, match="unknown tasks"):
        RankingMetrics(TASKS, 4, DOMAINS, domain_base_rates={"ctcvr": {"feed": 0.1}})
    with pytest.raises(ValueError, match=r"domain_base_rates\['ctr'\] names unknown domains "
                                         r"\['shop'\]"):
        RankingMetrics(TASKS, 4, DOMAINS, domain_base_rates={"ctr": {"shop": 0.1}})
    with pytest.raises(ValueError, match=r"domain_base_rates\['ctr'\]\['feed'\] must be"):
        RankingMetrics(TASKS, 4, DOMAINS, domain_base_rates={"ctr": {"feed": 1.5}})


def test_ranking_metrics_edge_cells():
    logits, labels, domain, mask = make_batch()
    rm = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"ctr": 0.4})
    rm.update(logits, labels, domain, mask)
    r = rm.compute()
    # empty domain: everything nan, n = 0
    for metric in ("ne", "auc", "calibration"):
        assert math.isnan(r[f"{metric}/ctr/search"]) and math.isnan(r[f"{metric}/cvr/search"])
    assert r["n/ctr/search"] == 0 and r["positives/cvr/search"] == 0
    # all-zero labels (cvr in reels): no training base rate for cvr -> NE nan; calibration and
    # AUC undefined; the rows still count
    assert r["n/cvr/reels"] > 0 and r["positives/cvr/reels"] == 0
    assert math.isnan(r["ne/cvr/reels"])
    assert math.isnan(r["calibration/cvr/reels"]) and math.isnan(r["auc/cvr/reels"])
    # with a training base rate the same cell has a finite NE
    rm2 = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"cvr": 0.05})
    rm2.update(logits, labels, domain, mask)
    assert math.isfinite(rm2.compute()["ne/cvr/reels"])


def test_ranking_metrics_accumulate_like_one_batch():
    logits, labels, domain, mask = make_batch()
    one = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"cvr": 0.05})
    one.update(logits, labels, domain, mask)
    many = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"cvr": 0.05})
    for lo, hi in [(0, 7), (7, 7), (7, 100), (100, 240)]:  # includes an empty batch
        many.update(logits[lo:hi], labels[lo:hi], domain[lo:hi], mask[lo:hi])
    assert_matches(many.compute(), one.compute(), tol=1e-12)


def test_ranking_metrics_mask_ignores_absent_entries():
    logits, labels, domain, mask = make_batch()
    poisoned_logits = torch.where(mask, logits, torch.nan)
    poisoned_labels = torch.where(mask, labels, torch.nan)
    rm = RankingMetrics(TASKS, 4, DOMAINS)
    rm.update(poisoned_logits, poisoned_labels, domain, mask)
    result = rm.compute()
    assert_matches(result, reference(logits, labels, domain, mask, {}), tol=1e-6)
    assert result["n/cvr/all"] == mask[:, 1].sum().item() < len(mask)
    # no mask = every label present
    full = RankingMetrics(TASKS, 4, DOMAINS)
    full.update(logits, labels, domain)
    everything = torch.ones_like(mask)
    assert_matches(full.compute(), reference(logits, labels, domain, everything, {}), tol=1e-6)


def test_ranking_metrics_single_class_everywhere_is_quiet(no_warnings):
    rm = RankingMetrics(["ctr"], 2)
    rm.update(t([[0.1], [2.0], [-1.0]]), t([[1], [1], [1]]), t([0, 1, 1], torch.int64))
    r = rm.compute()
    assert all(math.isnan(r[f"auc/ctr/{d}"]) for d in ("0", "1", "all"))
    assert all(math.isnan(r[f"ne/ctr/{d}"]) for d in ("0", "1", "all"))  # p̄ = 1
    assert r["calibration/ctr/all"] == pytest.approx(np_sigmoid(np.array([0.1, 2, -1])).sum() / 3)


def test_ranking_metrics_without_auc_and_reset():
    logits, labels, domain, mask = make_batch()
    rm = RankingMetrics(TASKS, 4, DOMAINS, compute_auc=False)
    rm.update(logits, labels, domain, mask)
    result = rm.compute()
    assert not any(k.startswith("auc/") for k in result)
    expected = reference(logits, labels, domain, mask, {})
    assert_matches(result, {k: v for k, v in expected.items() if not k.startswith("auc/")}, 1e-6)
    frame = to_frame(result)
    assert frame["auc"].isna().all()
    rm.reset()
    rm.update(logits[:0], labels[:0], domain[:0], mask[:0])
    after = rm.compute()
    assert after["n/ctr/all"] == 0 and math.isnan(after["ne/ctr/all"])


def test_ranking_metrics_int_labels_and_default_domain_names():
    rm = RankingMetrics(["ctr"], 2)
    rm.update(
        t([[0.0], [0.0], [0.0], [0.0]]),
        t([[1], [0], [0], [0]], torch.int64),
        t([0, 0, 1, 1], torch.int64),
    )
    r = rm.compute()
    # p = 0.5 everywhere, log loss ln 2; domain 0 has p̄ 1/2, domain 1 p̄ 0, all p̄ 1/4
    assert r["ne/ctr/0"] == pytest.approx(1.0)
    assert math.isnan(r["ne/ctr/1"])
    assert r["ne/ctr/all"] == pytest.approx(LN2 / H25)
    assert r["calibration/ctr/0"] == pytest.approx(1.0)
    assert r["calibration/ctr/all"] == pytest.approx(2.0)
    assert r["auc/ctr/all"] == pytest.approx(0.5)


def test_to_frame_layout():
    logits, labels, domain, mask = make_batch()
    rm = RankingMetrics(TASKS, 4, DOMAINS)
    rm.update(logits, labels, domain, mask)
    result = rm.compute()
    frame = to_frame(result)
    assert list(frame.columns) == ["task", "domain", "ne", "auc", "calibration", "n", "positives"]
    assert len(frame) == 2 * 5
    assert frame["n"].dtype == "int64"
    row = frame[(frame.task == "cvr") & (frame.domain == "all")].iloc[0]
    assert row["n"] == result["n/cvr/all"] and same(row["ne"], result["ne/cvr/all"])
    assert same(row["auc"], result["auc/cvr/all"])
    pd.testing.assert_series_equal(
        frame["domain"], pd.Series(DOMAINS + ["all"] + DOMAINS + ["all"], name="domain")
    )
    with pytest.raises(ValueError, match="metric"):
        to_frame({"loss/ctr/all": 1.0})


def test_ranking_metrics_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown tasks"):
        RankingMetrics(TASKS, 2, base_rates={"ctcvr": 0.1})
    with pytest.raises(ValueError, match="reserved"):
        RankingMetrics(TASKS, 2, ["feed", "all"])
    with pytest.raises(ValueError, match="domain_names"):
        RankingMetrics(TASKS, 2, ["feed"])
    with pytest.raises(ValueError, match="base_rates"):
        RankingMetrics(TASKS, 2, base_rates={"ctr": -0.1})
    rm = RankingMetrics(TASKS, 2)
    x, y = torch.zeros(3, 2), torch.zeros(3, 2)
    with pytest.raises(ValueError, match="domain ids"):
        rm.update(x, y, t([0, 1, 2], torch.int64))
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        rm.update(x, t([[0, 0], [0.5, 0], [0, 1]]), t([0, 1, 1], torch.int64))
    with pytest.raises(ValueError, match="labels must be 0 or 1"):  # nan only allowed if masked
        rm.update(x, t([[0, 0], [math.nan, 0], [0, 1]]), t([0, 1, 1], torch.int64))
    with pytest.raises(ValueError, match="logits must be"):
        rm.update(torch.zeros(3, 3), torch.zeros(3, 3), t([0, 1, 1], torch.int64))
    with pytest.raises(ValueError, match="mask must be bool"):
        rm.update(x, y, t([0, 1, 1], torch.int64), torch.ones(3, 2))
    # nothing was added by the rejected batches
    assert rm.compute()["n/ctr/all"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_ranking_metrics_cuda_matches_cpu():
    logits, labels, domain, mask = make_batch(4000, seed=3)
    cpu = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"ctr": 0.4})
    gpu = RankingMetrics(TASKS, 4, DOMAINS, base_rates={"ctr": 0.4}).cuda()
    for lo in range(0, 4000, 1000):
        sl = slice(lo, lo + 1000)
        cpu.update(logits[sl], labels[sl], domain[sl], mask[sl])
        gpu.update(logits[sl].cuda(), labels[sl].cuda(), domain[sl].cuda(), mask[sl].cuda())
    # float32 sums in another order on the GPU: AUC moved by 6e-8 on an H200, float32's own
    # precision (2^-24 ~ 6e-8) times a few accumulations, not the 1e-9 of a float64 check
    assert_matches(gpu.compute(), cpu.compute(), tol=1e-6)
    for cls in (NormalizedEntropy, Calibration, SafeBinaryAUROC):
        a, b = cls(), cls().cuda()
        a.update(logits[:, 0], labels[:, 0])
        b.update(logits[:, 0].cuda(), labels[:, 0].cuda())
        assert same(a.compute().item(), b.compute().item(), 1e-6)

"""What a trained Student Adapter learned: binned map, target calibration before and after, and
the plot (gemkd.adapters.learned_map)."""

from __future__ import annotations

import math

import pytest
import torch

from gemkd.adapters.learned_map import LearnedMap, collect_learned_map, plot_learned_map
from gemkd.adapters.methods import Adapter
from gemkd.transfer.methods import MethodContext, StepState, TeacherTargets
from tests.teachers.helpers import random_batch, tiny_schema


def _rows():
    # task a: two rows in bin [0, 1) (logits 0.2, 0.6; labels 1, 0) and one in [-1, 0) (-0.5, 1)
    zt = torch.tensor([[0.2, 0.0], [0.6, 0.0], [-0.5, 0.0]])
    za = zt + torch.tensor([[1.0, 0.0], [1.0, 0.0], [-2.0, 0.0]])
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    return zt, za, y


def test_bins_hold_means_label_log_odds_and_shift():
    m = LearnedMap(["a", "b"], edges=[-1.0, 0.0, 1.0])
    zt, za, y = _rows()
    m.update(zt, za, y)
    t = m.table()
    a = t[t["task"] == "a"].set_index("lo")
    assert a.loc[0.0, "rows"] == 2 and a.loc[-1.0, "rows"] == 1
    assert a.loc[0.0, "teacher_logit"] == pytest.approx(0.4)
    assert a.loc[0.0, "adapted_logit"] == pytest.approx(1.4)
    assert a.loc[0.0, "shift"] == pytest.approx(1.0)
    assert a.loc[0.0, "label_rate"] == pytest.approx(0.5)
    assert a.loc[0.0, "label_logit"] == pytest.approx(0.0)  # (1 + ½) / (2 + 1) = ½
    assert a.loc[-1.0, "label_logit"] == pytest.approx(math.log(0.75 / 0.25))
    assert a.loc[-1.0, "shift"] == pytest.approx(-2.0)
    assert m.table(min_rows=2)["rows"].min() >= 2  # sparse bins are left out


def test_calibration_and_ne_before_and_after():
    m = LearnedMap(["a", "b"], edges=[-1.0, 0.0, 1.0])
    zt, za, y = _rows()
    m.update(zt, za, y)
    c = m.calibration().set_index("task")
    sig = torch.sigmoid
    assert c.loc["a", "teacher_calibration"] == pytest.approx(float(sig(zt[:, 0]).sum()) / 2)
    assert c.loc["a", "adapted_calibration"] == pytest.approx(float(sig(za[:, 0]).sum()) / 2)
    p = 2 / 3
    h = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    assert c.loc["a", "teacher_ne"] == pytest.approx(float(bce(zt[:, 0], y[:, 0])) / h)
    assert c.loc["a", "adapted_ne"] == pytest.approx(float(bce(za[:, 0], y[:, 0])) / h)
    assert c.loc["b", "positives"] == 1 and c.loc["b", "rows"] == 3


def test_mask_merge_and_state_round_trip():
    zt, za, y = _rows()
    whole = LearnedMap(["a", "b"])
    whole.update(zt, za, y)
    first, second = LearnedMap(["a", "b"]), LearnedMap(["a", "b"])
    first.update(zt[:2], za[:2], y[:2])
    second.update(zt[2:], za[2:], y[2:])
    merged = LearnedMap.from_state(first.state()).merge(second)
    assert merged.table().equals(whole.table())
    masked = LearnedMap(["a", "b"])
    masked.update(zt, za, y, mask=torch.tensor([[True, False]] * 3))
    assert masked.calibration().set_index("task").loc["b", "rows"] == 0
    with pytest.raises(ValueError, match="differ"):
        whole.merge(LearnedMap(["a"]))
    with pytest.raises(ValueError, match="increasing"):
        LearnedMap(["a"], edges=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"\[B, 2\]"):
        whole.update(zt[:, :1], za[:, :1], y[:, :1])


def test_an_untrained_adapter_is_the_identity_and_a_trained_one_moves_the_targets():
    schema = tiny_schema()
    adapter = Adapter(adapter_hidden=4, adapter_lr=0.1, update="separate")
    adapter.setup(MethodContext(schema=schema, tasks=["click"], domains=schema.domains, lr=0.01))
    adapter.configure_optimizers()

    def teacher(batch) -> TeacherTargets:  # says logit 2 (p 0.88) for every row
        n = len(batch)
        return TeacherTargets(torch.full((n, 1), 2.0), torch.ones(n, dtype=torch.bool))

    batches = [random_batch(schema, b=32, seed=s, long_len=5) for s in range(3)]
    for b in batches:
        # one label in 8 is 1: the teacher (p 0.88) is badly over-calibrated
        b.labels = (torch.arange(32) % 8 == 0).float().unsqueeze(-1)
    before = collect_learned_map(adapter, teacher, batches, ["click"], trained_until_day=0)
    c = before.calibration().iloc[0]
    assert c["teacher_calibration"] == c["adapted_calibration"]  # identity at start
    assert c["teacher_calibration"] == pytest.approx(float(torch.sigmoid(torch.tensor(2.0))) * 8)
    assert before.table()["shift"].abs().max() == 0.0
    for _ in range(20):
        for b in batches:
            adapter.before_student(StepState(b, teacher, torch.device("cpu"),
                                             trained_until_day=0))
    after = collect_learned_map(adapter, teacher, batches, ["click"], trained_until_day=0)
    c = after.calibration().iloc[0]
    assert c["rows"] == 96
    assert c["adapted_ne"] < c["teacher_ne"]
    assert c["adapted_calibration"] < 0.5 * c["teacher_calibration"]
    assert after.table()["shift"].max() < -0.5  # it learned to pull the logits down


def test_plot_written_as_png(tmp_path):
    zt, za, y = _rows()
    maps = {}
    for lag in (0, 6):
        m = LearnedMap(["a", "b"])
        m.update(zt + lag, za + lag, y)
        maps[f"lag {lag}"] = m
    path = plot_learned_map(maps, tmp_path / "sub" / "map.png", min_rows=1, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["map.png"]  # no staging left
    with pytest.raises(ValueError, match="at least one map"):
        plot_learned_map({}, tmp_path / "x.png")

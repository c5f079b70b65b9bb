"""bench_step_ops' counting: one traced training step's aten ops add up across phases and model
parts, backward ops land on the part whose forward made them, the embedding lookups are
counted apart, and the annotation leaves the model as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.bench_step_ops import TrainStep, attach_precision
from benchmarks.step_ops import annotate, count_events, phase, trace
from gemkd.transfer.data.dataset_reader import DatasetReader

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def traced(tiny_data):
    cfg = yaml.safe_load((ROOT / "experiments/teacher/configs/tiny.yaml").read_text())["model"]
    batch = next(iter(DatasetReader(tiny_data, batch_size=64)))
    step = TrainStep(DatasetReader(tiny_data, batch_size=1).schema, cfg, "cpu")
    attach_precision(step)
    with annotate(step.model):
        counts = count_events(trace(lambda: step(batch), "cpu", warmup=1))
    return step, batch, counts


def test_counts_add_up_by_phase_and_part(traced):
    _, _, c = traced
    assert c["aten_ops"] == sum(c["by_phase"].values())
    assert 0 < c["top_level"] < c["aten_ops"]
    assert set(c["by_phase"]) <= {"forward", "loss", "backward", "clip", "optimizer", "other"}
    for name in ("forward", "loss", "backward", "clip", "optimizer"):
        assert c["by_phase"][name] > 0, name
    # the model's parts cover the forward and backward phases exactly
    assert sum(c["by_part"].values()) == c["by_phase"]["forward"] + c["by_phase"]["backward"]
    for part in ("embeddings", "cross", "wukong", "heads"):
        assert c["by_part"][part] > 0 and c["by_part"][part + ".backward"] > 0, part
    assert "kernels" not in c  # no GPU activity on a CPU trace
    assert 0 < c["kernel_like"] < c["aten_ops"]
    # no tensor value is read on the host inside the step (each would be a GPU sync)
    assert c["host_reads"] == 0


def test_a_host_read_inside_the_step_is_counted(traced):
    step, batch, _ = traced

    def with_item() -> None:
        loss = step(batch)
        with phase("loss"):
            float(loss)

    assert count_events(trace(with_item, "cpu", warmup=0))["host_reads"] == 1


def test_annotation_is_removed_and_changes_no_output(traced):
    step, batch, _ = traced
    for m in step.model.modules():
        assert not any(callable(v) and getattr(v, "__wrapped__", None) for v in vars(m).values())
    step.model.eval()
    with torch.no_grad():
        plain = step.model(batch).logits
        with annotate(step.model):
            annotated = step.model(batch).logits
    torch.testing.assert_close(annotated, plain, rtol=0, atol=0)

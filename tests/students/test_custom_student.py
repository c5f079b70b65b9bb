"""The documented plug-in path: a student in the user's own package, named by ``class_path``."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from gemkd.adapters.methods.param_share import ParamShare
from gemkd.students import StudentOutput, build_student
from gemkd.transfer.distill import DistillModule
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import MethodContext
from gemkd.transfer.testing import random_batch, tiny_schema

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "guides" / "custom_student.md"
CLASS_PATH = "my_students.tower.TwoTower"


@pytest.fixture(autouse=True)
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops on shared cores
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def schema():
    return tiny_schema()


def build(schema, tasks=("click", "conversion"), **init_args):
    torch.manual_seed(0)
    spec = {"class_path": CLASS_PATH, "init_args": init_args}
    return build_student(spec, schema, list(tasks))


def test_builds_without_gemkd_base_classes(schema):
    model = build(schema, dim=8)
    assert type(model).__name__ == "TwoTower" and isinstance(model, nn.Module)
    assert not any(c.__module__.startswith("gemkd.students") for c in type(model).__mro__)
    batch = random_batch(schema, b=16, long_len=100)
    out = model(batch)
    assert isinstance(out, StudentOutput)
    assert out.logits.shape == (16, 2) and out.embedding.shape == (16, 8)
    assert torch.isfinite(out.logits).all()


def test_trains_a_few_steps(schema):
    model = build(schema, dim=8)
    batch = random_batch(schema, b=64, seed=1, long_len=100)
    labels = batch.labels[:, :2]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = F.binary_cross_entropy_with_logits(model(batch).logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_repr_features_zero_init_and_truncation(schema):
    model = build(schema, dim=8, repr_dim=4, max_seq_len=3).eval()
    batch = random_batch(schema, b=16, seed=2, long_len=50)
    feats = torch.randn(16, 4) * 3
    with torch.no_grad():
        ref = model(batch).logits
        torch.testing.assert_close(model(batch, feats).logits, ref, rtol=0, atol=0)
        # only the 3 most recent events count: rewrite all older ones
        n = int(batch.seq_offsets[-1])
        seg = torch.repeat_interleave(torch.arange(16), batch.seq_lengths, output_size=n)
        old = batch.seq_offsets[1:][seg] - 1 - torch.arange(n) >= 3
        seq = {k: torch.where(old, v + 11, v) for k, v in batch.seq_values.items()}
        torch.testing.assert_close(model(replace(batch, seq_values=seq)).logits, ref)
    with pytest.raises(ValueError, match="repr_dim=4"):
        model(batch, torch.randn(16, 5))


def test_doc_yaml_builds_and_errors_name_the_class(schema):
    """The YAML snippet and the error message shown in docs/guides/custom_student.md are real."""
    text = DOC.read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    spec = yaml.safe_load(block)["student"]
    assert spec["class_path"] == CLASS_PATH
    model = build_student(spec, schema, None)
    assert model(random_batch(schema, b=4, long_len=30)).logits.shape == (4, 3)
    with pytest.raises(ConfigError) as info:
        build(schema, dimm=8)
    assert str(info.value) in text
    with pytest.raises(ConfigError, match=r"TwoTower: init_args.dim must be int, got 'big'"):
        build(schema, dim="big")
    with pytest.raises(ConfigError, match=r"No module named 'my_studentz'.*mlp, dcn, seq_pool"):
        build_student({"class_path": "my_studentz.tower.TwoTower"}, schema, None)


def doc_snippet(doc: Path, heading: str) -> str:
    """The first ``python`` block after ``heading`` in ``doc``."""
    return re.search(rf"{re.escape(heading)}\n.*?```python\n(.*?)```", doc.read_text(),
                     re.S).group(1)


def test_doc_check_snippet_runs(monkeypatch):
    """The "Check it" block of docs/guides/custom_student.md, as written, from the repository
    root (it puts docs/examples on the path itself and needs nothing outside the installed
    packages)."""
    code = doc_snippet(DOC, "## 8. Check it")
    assert "tests." not in code
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the snippet's path entry goes away after
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_snippet__"})


def test_param_share_refusal_is_the_documented_one(schema):
    """A student without the optional ``embedding_tables()`` (docs §7): param_share names it."""
    method = ParamShare()
    method.registered_name = "param_share"  # as a run names it
    ctx = MethodContext(schema=schema, tasks=["click"], domains=schema.domains, lr=0.01,
                        student=build(schema, ("click",), dim=8), teacher_weights=dict)
    with pytest.raises(ConfigError) as info:
        method.setup(ctx)
    assert f"`{info.value}`" in DOC.read_text()


def test_optional_output_bias_hook_is_called(schema):
    """TwoTower's optional ``init_output_bias`` (docs §7): the training module starts the head
    at each task's base-rate logit."""
    model = build(schema, dim=8)
    DistillModule(model, ["click", "conversion"], schema.domains,
                  base_rates={"click": 0.1, "conversion": 0.01})
    expected = torch.tensor([0.1, 0.01]).logit()
    torch.testing.assert_close(model.head.bias.detach(), expected)

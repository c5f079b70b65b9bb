"""The built-in students: shapes, on-device truncation, zero-init representation features,
gradient flow, learning on the tiny world, registry errors and the layering rule."""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gemkd.students import (
    BUILTIN_STUDENTS,
    DCNStudent,
    MLPStudent,
    SeqPoolStudent,
    StudentBase,
    StudentOutput,
    build_student,
)
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.errors import ConfigError
from tests.teachers.helpers import SEQUENCE, batch_from_lengths, random_batch, tiny_schema

NAMES = list(BUILTIN_STUDENTS)
ALL_FIELDS = [n for n, _ in SEQUENCE]
CLASSES = {"mlp": MLPStudent, "dcn": DCNStudent, "seq_pool": SeqPoolStudent}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def schema():
    return tiny_schema()


@pytest.fixture(scope="module")
def batch(schema):
    return random_batch(schema, b=32, seed=0, long_len=200)


def build(name, schema, tasks=None, seed=0, **init_args):
    torch.manual_seed(seed)
    return build_student({"class_path": name, "init_args": init_args}, schema, tasks)


def older_than(batch, k: int) -> torch.Tensor:
    """``bool [N]``: events that are not among the ``k`` most recent of their history."""
    offsets = batch.seq_offsets
    n = batch.seq_offsets[-1].item()
    seg = torch.repeat_interleave(torch.arange(len(batch)), batch.seq_lengths, output_size=n)
    return offsets[1:][seg] - 1 - torch.arange(n) >= k


# ---- contract ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_output_shapes(name, schema, batch):
    model = build(name, schema)
    assert isinstance(model, CLASSES[name]) and isinstance(model, StudentBase)
    out = model(batch)
    assert isinstance(out, StudentOutput)
    assert out.logits.shape == (32, 3) and out.distill_logits is None
    assert out.embedding.dim() == 2 and out.embedding.shape[0] == 32
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.embedding).all()
    # a task subset: its order defines the logit columns
    sub = build(name, schema, tasks=["conversion", "click"])
    assert sub.tasks == ["conversion", "click"] and sub(batch).logits.shape == (32, 2)


@pytest.mark.parametrize("name", NAMES)
def test_empty_histories_and_all_fields(name, schema):
    b = batch_from_lengths(schema, torch.tensor([0, 0, 3, 0, 25]), seed=1)
    model = build(name, schema, sequence=ALL_FIELDS, features=["ad_id", "country"],
                  use_dense=False, domain_embedding=False, embedding_dim=4, hidden=[8])
    out = model(b)
    assert out.logits.shape == (5, 3) and torch.isfinite(out.logits).all()
    empty = batch_from_lengths(schema, torch.zeros(4, dtype=torch.long), seed=2)
    assert torch.isfinite(model(empty).logits).all()


@pytest.mark.parametrize("name", NAMES)
def test_truncation_keeps_most_recent(name, schema, batch):
    k = 5
    model = build(name, schema, sequence=ALL_FIELDS, max_seq_len=k).eval()
    assert batch.seq_max_len > k
    old = older_than(batch, k)
    assert old.any() and (~old).any()
    scrambled = {f: torch.where(old, v.flip(0) + 7, v) for f, v in batch.seq_values.items()}
    with torch.no_grad():
        ref = model(batch).logits
        same = model(replace(batch, seq_values=scrambled)).logits
        recent = {f: torch.where(~old, v.flip(0) + 7, v) for f, v in batch.seq_values.items()}
        changed = model(replace(batch, seq_values=recent)).logits
    torch.testing.assert_close(same, ref, rtol=0, atol=0)
    assert not torch.allclose(changed, ref)


# ---- representation features -----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_repr_features_zero_init_then_learned(name, schema, batch):
    model = build(name, schema, repr_dim=6)
    feats = torch.randn(32, 6, generator=torch.Generator().manual_seed(3)) * 5 + 2
    torch.testing.assert_close(model(batch, feats).logits, model(batch).logits, rtol=0, atol=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = F.binary_cross_entropy_with_logits(model(batch, feats).logits, batch.labels)
    loss.backward()
    opt.step()
    with torch.no_grad():
        diff = (model(batch, feats).logits - model(batch).logits).abs().max()
    assert diff > 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_repr_feature_errors(name, schema, batch):
    with pytest.raises(ValueError, match="repr_dim is 0"):
        build(name, schema)(batch, torch.randn(32, 4))
    with pytest.raises(ValueError, match=r"expected \[B, 4\]"):
        build(name, schema, repr_dim=4)(batch, torch.randn(32, 5))


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name, schema, batch):
    model = build(name, schema, sequence=ALL_FIELDS, repr_dim=4)
    with torch.no_grad():  # zero-init blocks the LayerNorm's gradient at step 0 only
        model.repr_proj.weight.normal_(std=0.1)
    out = model(batch, torch.randn(32, 4))
    (out.logits.sum() + out.embedding.pow(2).mean()).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


def test_bad_config_and_batch(schema, batch):
    with pytest.raises(ConfigError, match="unknown categorical feature 'colour'"):
        MLPStudent(schema, features=["ad_id", "colour"])
    with pytest.raises(ConfigError, match="unknown task 'revenue'"):
        DCNStudent(schema, ["click", "revenue"])
    with pytest.raises(ConfigError, match="max_seq_len must be >= 0"):
        MLPStudent(schema, max_seq_len=-1)
    with pytest.raises(ConfigError, match="query_feature"):
        SeqPoolStudent(schema, features=["country"])
    with pytest.raises(ValueError, match="batch.categorical has 2 columns"):
        MLPStudent(schema)(replace(batch, categorical=batch.categorical[:, :2]))
    assert "user_id" not in MLPStudent(schema).features
    assert MLPStudent(schema).sequence == ["hist_item_id"]


# ---- learning on the tiny world ----------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tiny_data):
    train = list(DatasetReader(tiny_data, days=(0, 4), batch_size=1024, shuffle=True, seed=0))
    test = list(DatasetReader(tiny_data, days=(4, 6), batch_size=4096))
    return DatasetReader(tiny_data).schema, train, test


def test_every_builtin_learns(world):
    schema, train, test = world
    click = schema.tasks.index("click")
    y_train = torch.cat([b.labels[:, click] for b in train])
    y_test = torch.cat([b.labels[:, click] for b in test])
    p = y_train.mean().item()
    base = -(y_test * math.log(p) + (1 - y_test) * math.log(1 - p)).mean().item()
    for name in NAMES:
        model = build(name, schema)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(3):
            for b in train:
                loss = F.binary_cross_entropy_with_logits(model(b).logits, b.labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            logits = torch.cat([model(b).logits[:, click] for b in test])
        ll = F.binary_cross_entropy_with_logits(logits, y_test).item()
        assert ll < 0.995 * base, f"{name}: click log loss {ll:.4f}, base rate {base:.4f}"


# ---- registry ----------------------------------------------------------------------------------
class NotAStudent:
    def __init__(self, schema, tasks):
        pass


class NoSchema(nn.Module):
    def __init__(self, width: int = 3):
        super().__init__()


class Picky(MLPStudent):
    """Forwards **kwargs to MLPStudent → StudentBase: their arguments are accepted too."""

    def __init__(self, schema, tasks=None, *, scale: float = 1.0, **kwargs):
        super().__init__(schema, tasks, **kwargs)
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}")


def test_registry_builtins(schema):
    assert BUILTIN_STUDENTS == {"mlp": "gemkd.students.mlp_student.MLPStudent",
                                "dcn": "gemkd.students.dcn.DCNStudent",
                                "seq_pool": "gemkd.students.seq_pool.SeqPoolStudent"}
    model = build_student({"class_path": "gemkd.students.dcn.DCNStudent",
                           "init_args": {"n_cross": 1, "hidden": [16]}}, schema, ["click"])
    assert isinstance(model, DCNStudent) and len(model.cross) == 1
    assert isinstance(build_student("mlp", schema, None), MLPStudent)


@pytest.mark.parametrize("spec, pattern", [
    ({"class_path": "mlpp"}, r"unknown student 'mlpp'.*mlp, dcn, seq_pool.*could not be imported"),
    ({"class_path": "foo.Bar"},
     r"'foo.Bar' could not be imported \(ModuleNotFoundError: No module named 'foo'\).*"
     r"mlp, dcn, seq_pool"),
    ({"class_path": "gemkd.students.mlp_student.Nope"},
     r"has no attribute 'Nope'.*mlp, dcn, seq_pool"),
    ({"class_path": "tests.students.test_students.NotAStudent"},
     r"class 'NotAStudent', not a torch.nn.Module subclass"),
    ({"class_path": "gemkd.students.build_student"},
     r"function 'build_student', not a torch.nn.Module"),
    ({"class_path": "tests.students.test_students.NoSchema"},
     r"NoSchema: its constructor must accept \(schema, tasks"),
    ({"class_path": "mlp", "init_args": {"hiden": [8]}},
     r"student MLPStudent: unknown init_args.hiden; accepted: .*hidden"),
    ({"class_path": "dcn", "init_args": {"n_cross": "2"}},
     r"student DCNStudent: init_args.n_cross must be int, got '2'"),
    ({"class_path": "seq_pool", "init_args": {"hidden": [8, "x"]}},
     r"SeqPoolStudent: init_args.hidden must be list\[int\] \| None"),
    ({"class_path": "mlp", "init_args": {"schema": None}}, r"init_args.schema is passed by gemkd"),
    ({"class_path": "mlp", "init_args": {"hidden": []}}, r"MLPStudent: hidden must be"),
    ({"class_path": "tests.students.test_students.Picky", "init_args": {"hiden": [8]}},
     r"student Picky: unknown init_args.hiden"),
    ({"class_path": "tests.students.test_students.Picky", "init_args": {"scale": -1}},
     r"student Picky: invalid init_args \(scale must be > 0, got -1\)"),
    ({"class_path": "mlp", "args": {}}, r"unknown key 'args'"),
    ({"init_args": {}}, r"student.class_path must be"),
    ({"class_path": "mlp", "init_args": [1]}, r"student.init_args must be a mapping"),
])
def test_registry_errors(schema, spec, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        build_student(spec, schema, None)
    assert "\n" not in str(info.value)


def test_registry_follows_kwargs_to_base(schema, batch):
    model = build_student({"class_path": "tests.students.test_students.Picky",
                           "init_args": {"scale": 2.0, "hidden": [8], "embedding_dim": 4}},
                          schema, None)
    assert model.hidden == [8] and model(batch).logits.shape == (32, 3)


def test_students_import_only_transfer():
    """DESIGN §1: students → transfer, never teachers / adapters / experiments."""
    root = Path(__file__).resolve().parents[2] / "students"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for m in mods:
                top = m.split(".")[1] if m.startswith("gemkd.") else m.split(".")[0]
                assert top not in {"teachers", "adapters", "experiments"}, (path, m)


ROOT = Path(__file__).resolve().parents[2]


def _public(cls: type) -> list[str]:
    return [n for n, v in vars(cls).items()
            if not n.startswith("_") and (callable(v) or isinstance(v, property))]


def test_a_student_writes_one_forward():
    """No stacked twins: StudentBase keeps at most 15 public methods, each named in the custom
    student guide, and a built-in defines forward and __init__ only (a pack's stacked forward
    lives in transfer/packs)."""
    public = _public(StudentBase)
    assert 10 <= len(public) <= 15, public
    assert not [n for n in dir(StudentBase) if "stacked" in n]
    guide = (ROOT / "docs" / "guides" / "custom_student.md").read_text()
    assert not [n for n in public if f"`{n}" not in guide]
    for cls in CLASSES.values():
        assert [n for n in _public(cls) if n != "forward"] == [], cls
        assert not [n for n in dir(cls) if "stacked" in n], cls

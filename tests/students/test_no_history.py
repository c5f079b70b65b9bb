"""The built-in students on a log without histories (no sequence fields, batches without events):
the default students (mlp, the quickstart's, and dcn) build without a history arm and learn; the
history-only student (seq_pool) and a named missing field are clear errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemkd.students import StudentBase, build_student
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.ops import segment_mean
from tests.teachers.helpers import TASKS, random_batch, tiny_schema
from tests.teachers.history_less import history_less_batch, history_less_schema

B = 32
QUICKSTART = {"embedding_dim": 8, "max_seq_len": 20, "hidden": [64, 32]}  # its student's args


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def schema():
    return history_less_schema()


@pytest.fixture(scope="module")
def batch(schema):
    return history_less_batch(schema, b=B, seed=0)


def build(name, schema, tasks=None, **init_args):
    torch.manual_seed(0)
    return build_student({"class_path": name, "init_args": init_args}, schema, tasks)


def fit_steps(model, batch, steps: int = 15) -> tuple[float, float]:
    """BCE before and after ``steps`` Adam steps on one fixed batch."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    labels = batch.labels[:, [TASKS.index(t) for t in model.tasks]]
    losses = []
    for _ in range(steps + 1):
        loss = F.binary_cross_entropy_with_logits(model(batch).logits, labels)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses[0], losses[-1]


@pytest.mark.parametrize("name", ["mlp", "dcn"])
@pytest.mark.parametrize("args", [{}, QUICKSTART], ids=["defaults", "quickstart"])
def test_default_students_build_without_history_and_learn(name, args, schema, batch):
    model = build(name, schema, ["click", "conversion"], **args)
    assert isinstance(model, StudentBase) and model.sequence == []
    assert not len(model.seq_tables)
    out = model(batch)
    assert out.logits.shape == (B, 2) and torch.isfinite(out.logits).all()
    assert out.embedding.shape[0] == B and torch.isfinite(out.embedding).all()
    first, last = fit_steps(model, batch)
    assert last < 0.9 * first, (first, last)


@pytest.mark.parametrize("name", ["mlp", "dcn"])
def test_representation_features_without_history(name, schema, batch):
    model = build(name, schema, repr_dim=4)
    features = torch.randn(B, 4, generator=torch.Generator().manual_seed(1))
    out = model(batch, features)
    assert out.logits.shape == (B, 3) and torch.isfinite(out.logits).all()


def test_history_is_empty_without_sequence_fields(schema, batch):
    """Building blocks that pool the history see every history empty (mean 0), not an error."""
    model = build("mlp", schema)
    events, offsets = model.history(batch)
    assert events.shape == (0, model.embedding_dim)
    assert offsets.shape == (B + 1,) and not offsets.any()
    assert torch.equal(segment_mean(events, offsets), torch.zeros(B, model.embedding_dim))
    # a student that reads no field of a dataset that has some: the batch's offsets count
    # events it never embeds, so its own are zero too
    full = random_batch(tiny_schema(), b=8, seed=0, long_len=50)
    none = build("mlp", tiny_schema(), sequence=[])
    events, offsets = none.history(full)
    assert events.shape == (0, none.embedding_dim) and not offsets.any()
    assert torch.isfinite(none(full).logits).all()


def test_seq_pool_says_the_dataset_has_no_history(schema):
    with pytest.raises(ConfigError, match=r"SeqPoolStudent.*no sequence fields.*mlp or dcn"):
        build("seq_pool", schema)
    with pytest.raises(ConfigError, match=r"SeqPoolStudent.*init_args.sequence is empty"):
        build("seq_pool", tiny_schema(), sequence=[])


def test_a_named_field_the_data_lacks_is_an_error(schema):
    with pytest.raises(ConfigError, match="'hist_item_id'; the dataset has: no sequence fields"):
        build("mlp", schema, sequence=["hist_item_id"])

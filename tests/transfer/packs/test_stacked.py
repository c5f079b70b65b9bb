"""A built-in student's stacked forward (a pack's K members in one set of ops, registered by
class in transfer/packs): member k's outputs and gradients are those of its stacked forward
alone (K = 1), bit for bit, and they mirror the student's own forward; a student whose class
changed ``forward`` is not stacked."""

from __future__ import annotations

import pytest
import torch

from gemkd.students import MLPStudent, build_student
from gemkd.transfer.packs import stacked
from gemkd.transfer.packs.pack import stacked_forward
from gemkd.transfer.packs.stacked_students import register_stacked
from tests.teachers.helpers import SEQUENCE, batch_from_lengths, random_batch, tiny_schema

K = 3
ALL_FIELDS = [n for n, _ in SEQUENCE]
STUDENTS = {
    "mlp": {"hidden": [16, 8]},
    "dcn": {"hidden": [16], "n_cross": 2},
    "seq_pool": {"hidden": [16]},
    "mlp_all_fields": {"hidden": [8], "sequence": ALL_FIELDS, "repr_dim": 5},
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _members(name: str, schema) -> list[torch.nn.Module]:
    args = dict(STUDENTS[name])
    cls = name.removesuffix("_all_fields")
    out = []
    for seed in range(K):
        torch.manual_seed(seed)
        m = build_student({"class_path": cls, "init_args": args}, schema, None)
        with torch.no_grad():  # zero-initialised paths get weights, so they carry gradients
            for p in m.parameters():
                p.add_(0.1 * torch.randn_like(p))
        out.append(m)
    return out


def _stack(members, k=None):
    chosen = members if k is None else [members[k]]
    names = [n for n, _ in members[0].named_parameters()]
    return {n: torch.stack([dict(m.named_parameters())[n].detach() for m in chosen])
            .requires_grad_() for n in names}


def _forward(model):
    forward = stacked_forward(model)
    assert forward is not None
    return forward


def _run(model, params, batch, features, weights):
    out = _forward(model)(params, batch, features)
    loss = (out.logits * weights[:out.logits.shape[0]]).sum() \
        + out.embedding.square().sum() * 0.01
    loss.backward()
    return out


#: (student, representation features: none, every member's [B, F], each member's [K, B, F])
CASES = [*((name, "none") for name in STUDENTS),
         *((name, kind) for name in STUDENTS if STUDENTS[name].get("repr_dim")
           for kind in ("shared", "each"))]


@pytest.mark.parametrize(("name", "feature_kind"), CASES)
def test_a_member_is_its_stacked_forward_alone(name, feature_kind):
    schema = tiny_schema()
    members = _members(name, schema)
    repr_dim = STUDENTS[name].get("repr_dim", 0)
    # histories of every length, empty ones and ones past max_seq_len included
    batch = batch_from_lengths(schema, torch.tensor([0, 3, 40, 0, 7, 25, 1, 60]), seed=3)
    g = torch.Generator().manual_seed(4)
    feats = {"none": None, "shared": torch.randn(len(batch), max(repr_dim, 1), generator=g),
             "each": torch.randn(K, len(batch), max(repr_dim, 1), generator=g)}[feature_kind]
    weights = torch.randn(K, len(batch), 3, generator=g)
    params = _stack(members)
    packed = _run(members[0], params, batch, feats, weights)
    assert packed.logits.shape == (K, len(batch), 3)
    for k in range(K):
        own = _stack(members, k)
        f = feats[k:k + 1] if feature_kind == "each" else feats
        alone = _run(members[k], own, batch, f, weights[k:k + 1])
        assert torch.equal(packed.logits[k], alone.logits[0]), k
        assert torch.equal(packed.embedding[k], alone.embedding[0]), k
        for n, p in params.items():
            if p.grad is None:  # the representation path without features
                assert own[n].grad is None and n.startswith("repr_") and f is None, n
                continue
            assert torch.equal(p.grad[k], own[n].grad[0]), (k, n)
        # the stacked forward mirrors the student's own (other kernels: equal to rounding)
        with torch.no_grad():
            ref = members[k](batch, None if f is None else f.reshape(len(batch), -1))
        torch.testing.assert_close(packed.logits[k].detach(), ref.logits, rtol=1e-5,
                                   atol=1e-5)


def test_the_history_bags_of_one_and_of_many_members_agree():
    """The bag gradient sorts events once for several members and adds them in event order
    for one: the same sums, so member 0 of three equals it alone."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(K, 50, 4, generator=g)
    offsets = torch.tensor([0, 0, 6, 9, 30, 30])
    ids = torch.randint(0, 50, (30,), generator=g)
    grad = torch.randn(K, 5, 4, generator=g)
    many = weight.clone().requires_grad_()
    (stacked.bag_mean(ids, many, offsets) * grad).sum().backward()
    for k in range(K):
        one = weight[k:k + 1].clone().requires_grad_()
        out = stacked.bag_mean(ids, one, offsets)
        (out * grad[k:k + 1]).sum().backward()
        assert torch.equal(out[0], stacked.bag_mean(ids, weight, offsets)[k])
        assert torch.equal(many.grad[k], one.grad[0]), k
    assert torch.equal(stacked.bag_mean(ids, weight, offsets)[:, 0], torch.zeros(K, 4))


def test_only_a_class_that_mirrors_its_forward_is_stacked():
    schema = tiny_schema()

    class OwnInit(MLPStudent):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)

    class OwnForward(MLPStudent):
        def forward(self, batch, features=None):
            return super().forward(batch, features)

    class OwnBlock(MLPStudent):
        def dense_input(self, batch):
            return super().dense_input(batch) * 2

    plain = MLPStudent(schema)
    assert stacked_forward(plain) is not None
    assert stacked_forward(OwnInit(schema)) is not None
    assert stacked_forward(OwnForward(schema)) is None
    assert stacked_forward(OwnBlock(schema)) is None
    assert stacked_forward(torch.nn.Linear(2, 2)) is None


def test_a_batch_without_histories_stacks():
    schema = tiny_schema()
    members = _members("mlp", schema)
    batch = random_batch(schema, b=4, seed=1, long_len=0)
    empty = batch_from_lengths(schema, torch.zeros(4, dtype=torch.long), seed=2)
    for b in (batch, empty):
        out = _forward(members[0])(_stack(members), b)
        assert out.logits.shape == (K, 4, 3) and torch.isfinite(out.logits).all()


def test_every_builtin_student_has_a_registered_stacked_forward():
    schema = tiny_schema()
    for name in STUDENTS:
        model = build_student({"class_path": name.removesuffix("_all_fields"),
                               "init_args": {}}, schema, None)
        assert stacked_forward(model) is not None, name


def test_a_stacked_forward_is_registered_for_a_class_that_defines_forward():
    class NoForward(MLPStudent):
        pass

    with pytest.raises(TypeError, match="NoForward does not define forward"):
        register_stacked(NoForward, lambda s, p, b, f=None: None)


@pytest.mark.parametrize("name", list(STUDENTS))
def test_vmap_over_the_one_forward_gives_the_stacked_forwards_numbers(name):
    """What a pack runs for a student without a stacked forward (or a subclass that changed
    forward): ``vmap`` over ``functional_call`` of the student's forward; the registered
    stacked forward gives the same outputs and gradients to rounding."""
    from torch.func import functional_call, vmap

    schema = tiny_schema()
    members = _members(name, schema)
    batch = batch_from_lengths(schema, torch.tensor([0, 3, 40, 0, 7, 25, 1, 60]), seed=3)
    weights = torch.randn(K, len(batch), 3, generator=torch.Generator().manual_seed(4))
    params = _stack(members)
    stacked_out = _run(members[0], params, batch, None, weights)
    mapped = {n: p.detach().clone().requires_grad_() for n, p in params.items()}

    def one(p):
        out = functional_call(members[0], p, (batch,))
        return out.logits, out.embedding

    logits, embedding = vmap(one)(mapped)
    ((logits * weights).sum() + embedding.square().sum() * 0.01).backward()
    torch.testing.assert_close(logits, stacked_out.logits.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(embedding, stacked_out.embedding.detach(), rtol=1e-5, atol=1e-6)
    for n, p in params.items():
        if p.grad is None:
            assert mapped[n].grad is None or not mapped[n].grad.any(), n
            continue
        torch.testing.assert_close(mapped[n].grad, p.grad, rtol=1e-4, atol=1e-6, msg=n)

"""The built-in transfer methods as plug-ins: their hooks, knobs and errors (DESIGN §5.1)."""

from __future__ import annotations

import pytest
import torch

from gemkd.adapters.methods import Adapter, AuxHead, ParamShare, Repr
from gemkd.adapters.methods.param_share import fit_width, teacher_table
from gemkd.experiments.run.methods import build_methods, check_variant, search_space
from gemkd.experiments.spec import load_spec, parse_variants
from gemkd.students import build_student
from gemkd.teachers import GEM
from gemkd.transfer.distill import DistillModule
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import KD, MethodContext, StepState, TeacherTargets
from gemkd.transfer.models import StudentOutput
from tests.teachers.helpers import TINY, random_batch, tiny_schema


@pytest.fixture(scope="module")
def schema():
    return tiny_schema()


def ctx_for(schema, student=None, teacher=None, **kw) -> MethodContext:
    return MethodContext(schema=schema, tasks=["click"], domains=schema.domains, lr=0.01,
                         student=student, teacher=teacher,
                         sample_batch=lambda: random_batch(schema, b=8, long_len=20), **kw)


def fixed_teacher(batch) -> TeacherTargets:
    n = len(batch)
    return TeacherTargets(torch.full((n, 1), 2.0), torch.ones(n, dtype=torch.bool),
                          torch.ones(n, 4))


def test_kd_loss_is_on_the_serving_head_or_the_named_distillation_head(schema):
    batch = random_batch(schema, b=6, long_len=10)
    step = StepState(batch, fixed_teacher, torch.device("cpu"))
    out = StudentOutput(logits=torch.zeros(6, 1), embedding=torch.ones(6, 3))
    kd = KD(kd_weight=2.0)
    on_serving = kd.loss(step, out)["kd"]
    expect = 2.0 * torch.nn.functional.binary_cross_entropy_with_logits(
        torch.zeros(1), torch.sigmoid(torch.tensor([2.0])))
    assert torch.allclose(on_serving, expect)
    step.distill_logits, step.distill_weight = torch.full((6, 1), 2.0), 0.5
    assert kd.loss(step, out)["kd"] < on_serving  # a head that already agrees, half weight
    assert KD(kd_weight=0.0).loss(step, out) == {}
    with pytest.raises(ValueError, match="kd loss"):
        KD(loss="kl")


def test_aux_head_takes_the_distillation_loss_and_scales_labels(schema):
    student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema,
                            ["click"])
    aux = AuxHead(aux_beta=0.5, aux_weight=2.0, label_weight=0.7)
    aux.setup(ctx_for(schema, student))
    batch = random_batch(schema, b=6, long_len=10)
    step = StepState(batch, fixed_teacher, torch.device("cpu"))
    aux.before_student(step)
    out = student(batch)
    aux.after_forward(step, out)
    assert step.label_weight == 0.7 and step.distill_weight == 2.0
    assert step.distill_logits.shape == (6, 1) and aux.head.beta == 0.5


@pytest.mark.parametrize("hidden", [0, 4])
def test_aux_head_starts_at_the_base_rate_like_the_serving_head(schema, hidden):
    """A head that starts at p = 0.5 sends a calibration gradient (× β) into the trunk on the
    first steps: on the quickstart that cost kd_aux most of its gain (ΔNE 0.0010 vs 0.0092)."""
    student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema,
                            ["click"])
    aux = AuxHead(hidden=hidden)
    aux.setup(ctx_for(schema, student))
    DistillModule(student, ["click"], schema.domains, methods=[KD(), aux],
                  teacher=fixed_teacher, base_rates={"click": 0.02})
    want = torch.log(torch.tensor(0.02)) - torch.log1p(torch.tensor(-0.02))
    assert aux.head.net[-1].bias.item() == pytest.approx(want.item(), rel=1e-5)
    assert student.head.bias.item() == pytest.approx(want.item(), rel=1e-5)
    off = AuxHead(hidden=hidden)
    off.setup(ctx_for(schema, student))
    before = off.head.net[-1].bias.clone()
    DistillModule(student, ["click"], schema.domains, methods=[KD(), off],
                  teacher=fixed_teacher, base_rates={"click": 0.02}, init_output_bias=False)
    assert torch.equal(off.head.net[-1].bias, before)


def test_adapter_objective_and_optimizer_are_its_own(schema):
    adapter = Adapter(adapter_hidden=4, adapter_lr=0.1, optimizer="sgd", objective="brier",
                      update="separate")
    adapter.setup(ctx_for(schema))
    (opt,) = adapter.configure_optimizers()
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["lr"] == 0.1
    assert adapter.param_groups(0.01) == []  # not in the student's optimiser
    batch = random_batch(schema, b=16, long_len=10)
    batch.labels = torch.zeros(16, 1)
    step = StepState(batch, fixed_teacher, torch.device("cpu"), torch.zeros(16))
    for _ in range(30):
        adapter.before_student(step)
    # every label is 0 and the teacher says logit 2: the realigned target moved down
    assert (step.kd_logits < 1.5).all()
    with pytest.raises(ValueError, match="objective"):
        Adapter(objective="hinge")
    with pytest.raises(ValueError, match="optimizer must be adam"):
        Adapter(optimizer="sgd")  # fused: the student's optimiser trains it


def test_fused_adapter_trains_in_the_students_step(schema):
    adapter = Adapter(adapter_hidden=4, adapter_lr=0.05, features=["ad_category"])
    adapter.setup(ctx_for(schema))
    assert adapter.configure_optimizers() == []
    (group,) = adapter.param_groups(0.01)
    assert group["lr"] == 0.05 and len(group["params"]) == len(list(adapter.parameters()))
    batch = random_batch(schema, b=16, long_len=10)
    batch.labels = torch.zeros(16, 1)
    step = StepState(batch, fixed_teacher, torch.device("cpu"), torch.zeros(16))
    adapter.before_student(step)
    assert not step.kd_logits.requires_grad  # the target before the adapter's update
    assert torch.allclose(step.kd_logits, torch.full((16, 1), 2.0))  # identity at start
    (term,) = adapter.loss(step, None).values()
    term.backward()
    assert all(p.grad is not None for p in adapter.parameters() if p.requires_grad)
    assert adapter.loss(step, None) == {}  # one term per step
    with pytest.raises(ConfigError, match="feature 'colour'"):
        Adapter(features=["colour"]).setup(ctx_for(schema))


def test_repr_attention_pooling_starts_as_the_mean(schema, tmp_path):
    from gemkd.transfer.repr_features import AsOfCodes, CodeStore, write_code_store

    rng = torch.Generator().manual_seed(0)
    n = 40
    write_code_store(tmp_path / "codes", torch.arange(n), torch.arange(n) % 5,
                     torch.arange(n) * 10, torch.zeros(n, dtype=torch.int64),
                     torch.randint(-127, 127, (n, 4), generator=rng).to(torch.int8).numpy(),
                     8, 4, {"teacher_version": "t"})
    asof = AsOfCodes(CodeStore(tmp_path / "codes"), max_events=5)
    ctx = ctx_for(schema, codes=asof)
    mean, att = Repr(), Repr(pooling="attention")
    assert mean.feature_dim(ctx) == att.feature_dim(ctx) == 4
    mean.setup(ctx)
    att.setup(ctx)
    batch = random_batch(schema, b=8, long_len=10)
    batch.user_id = torch.arange(8) % 5
    batch.ts = torch.full((8,), 1000)
    assert torch.allclose(mean.features(batch), att.features(batch), atol=1e-6)
    assert len(att.param_groups(0.01)[0]["params"]) == 3 and mean.param_groups(0.01) == []
    with pytest.raises(ConfigError, match="query_feature 'nope'"):
        Repr(pooling="attention", query_feature="nope").setup(ctx)


def test_param_share_copies_and_freezes_the_teachers_tables(schema):
    teacher = GEM.from_config(schema, TINY)
    student = build_student({"class_path": "mlp", "init_args": {"embedding_dim": 4}}, schema,
                            ["click"])
    weights = teacher.state_dict()
    share = ParamShare(freeze=True)
    share.setup(ctx_for(schema, student, teacher_weights=lambda: weights))
    assert "ad_id" in share.shared and "user_id" not in share.shared  # the student has no user
    src = teacher_table(weights, "ad_id")
    dst = student.embedding_tables()["ad_id"].weight
    assert torch.allclose(dst, fit_width(src, 4)[torch.arange(dst.shape[0]) % src.shape[0]])
    assert not dst.requires_grad
    module = DistillModule(student, ["click"], schema.domains, methods=[share])
    opt = module.configure_optimizers()[0]
    assert all(p is not dst for g in opt.param_groups for p in g["params"])
    with pytest.raises(ConfigError, match="no table 'colour'"):
        ParamShare(tables=["colour"]).setup(ctx_for(schema, student,
                                                     teacher_weights=lambda: weights))
    w = torch.randn(50, 8)
    assert fit_width(w, 8).equal(w) and fit_width(w, 3).shape == (50, 3)


def test_variants_compose_and_their_grids(tmp_path):
    spec = load_spec(None, ["variants={kd: [kd], both: [kd, aux_head, adapter], "
                            "fixed: [{class_path: kd, init_args: {kd_weight: 3.0}}]}"])
    kd, both, fixed = spec.variants
    # the student's lr and EMA decay are knobs of every variant (tuning.draws: per_seed)
    assert list(search_space(spec, kd)) == ["alpha", "ema_decay", "lr", "temperature"]
    assert list(search_space(spec, both)) == ["adapter_hidden", "alpha", "aux_beta",
                                              "ema_decay", "lr", "temperature"]
    # λ fixed: neither α nor λ
    assert list(search_space(spec, fixed)) == ["ema_decay", "lr", "temperature"]
    (method,) = build_methods(spec, fixed, {"temperature": 1.0})
    assert method.kd_weight == 3.0
    built = build_methods(spec, both, {"kd_weight": 2.0, "temperature": 1.0, "aux_beta": 0.5,
                                       "adapter_hidden": 16})
    assert [type(m).__name__ for m in built] == ["KD", "AuxHead", "Adapter"]
    assert built[0].kd_weight == 2.0 and built[1].aux_beta == 0.5


@pytest.mark.parametrize("variants, message", [
    ({"a": ["aux_head"]}, "requires 'kd_loss'"),
    ({"a": ["kd", "kd"]}, "both tune 'alpha'"),
    ({"a": ["boost"]}, "unknown method 'boost'"),
    ({"a": ["gemkd.transfer.methods.MethodContext"]},
     "not a gemkd.transfer.methods.base.TransferMethod"),
    ({"a": [{"class_path": "kd", "init_args": {"weight": 1}}]}, "unknown init_args.weight"),
    ({"a": {"teacher": "fm", "methods": ["kd"]}}, "teacher 'fm'"),
])
def test_bad_variants(variants, message):
    spec = load_spec(None, ["variants=[kd]"])
    with pytest.raises(ConfigError, match=message):
        for v in parse_variants(variants):
            check_variant(spec, v)


def test_out_of_range_tuning_value_is_found_up_front():
    spec = load_spec(None, ["variants=[kd]", "tuning.knobs.kd_weight=[1.0, -2.0]"])
    with pytest.raises(ConfigError, match="kd_weight=-2.0 .* kd_weight >= 0"):
        check_variant(spec, spec.variants[0])


class _MseKD(KD):
    """A KD subclass under another name: the spec's kd_loss reaches it too."""


class _WantsUnknownSpecKey(KD):
    spec_defaults = {"loss": "no_such_key"}


def test_spec_defaults_are_declared_by_the_method_not_its_name():
    spec = load_spec(None, ["kd_loss=mse", "variants={a: [kd], b: [tests.adapters.methods."
                            "test_methods._MseKD], c: [{class_path: kd, init_args: {loss: bce}}], "
                            "d: [aux_head, kd]}"])
    built = {v.name: build_methods(spec, v, {}) for v in spec.variants}
    assert built["a"][0].kd_loss == built["b"][0].kd_loss == "mse"
    assert built["c"][0].kd_loss == "bce"  # the variant's own init_args win
    assert not AuxHead.spec_defaults and built["d"][1].kd_loss == "mse"
    bad = load_spec(None, ["variants={x: [tests.adapters.methods.test_methods."
                           "_WantsUnknownSpecKey]}"])
    with pytest.raises(ConfigError, match="spec_defaults names 'no_such_key'"):
        check_variant(bad, bad.variants[0])


def test_kd_at_temperature_one_and_unit_weights_skips_only_identities():
    """T = 1 and weight 1 skip ``/ T``, ``T² ·`` and ``1 ·``: the same loss and the same
    gradients, bit for bit, as the general formula."""
    from gemkd.transfer.methods.losses import kd_bce

    g = torch.Generator().manual_seed(0)
    zs = torch.randn(64, 2, generator=g, requires_grad=True)
    zt = torch.randn(64, 2, generator=g) * 3
    t = 1.0
    general = t * t * torch.nn.functional.binary_cross_entropy_with_logits(
        zs / t, torch.sigmoid(zt / t), reduction="none")
    (grad_general,) = torch.autograd.grad(1.0 * general.sum(), zs)
    fast = kd_bce(zs, zt, 1.0)
    (grad_fast,) = torch.autograd.grad(fast.sum(), zs)
    assert torch.equal(fast, general) and torch.equal(grad_fast, grad_general)


def test_method_groups_with_the_students_settings_join_its_group(schema):
    """A method's parameter group with the settings of one of the student's (lr, weight decay
    and the optimiser's defaults) joins it; others stay their own group. Every parameter is
    in exactly one group either way."""
    student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema,
                            ["click"])
    aux = AuxHead()  # the student's lr, no weight decay: the dense group's settings
    aux.setup(ctx_for(schema, student))
    fused = Adapter(adapter_lr=0.05)  # its own lr: its own group
    fused.setup(ctx_for(schema))
    module = DistillModule(student, ["click"], schema.domains, methods=[KD(), aux, fused],
                           teacher=fixed_teacher, lr=0.01)
    (opt,) = module.configure_optimizers()
    groups = {g["name"]: g for g in opt.param_groups}
    assert set(groups) == {"embedding", "dense", "Adapter"}
    assert {id(p) for p in aux.parameters()} <= {id(p) for p in groups["dense"]["params"]}
    assert groups["Adapter"]["lr"] == 0.05
    params = [p for g in opt.param_groups for p in g["params"]]
    assert len(params) == len({id(p) for p in params}) == len(list(module.parameters()))

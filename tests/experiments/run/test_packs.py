"""A pack of student runs gives every member its run alone's record, curve and clusters (batched,
the default: a run alone is a batched pack of one; exact: Lightning's run alone); runs that
cannot be stacked, or have a tracker, run through Lightning; runs group by what they share."""

from __future__ import annotations

import dataclasses
import logging
import pickle

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from gemkd.experiments.run import executors, packs
from gemkd.experiments.run.jobs import StudentRun, execute
from gemkd.experiments.run.packs import execute_pack, group_packs, pack_key, run_alone
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.experiments.spec.run_spec import BUILTIN_VARIANTS
from gemkd.students import StudentOutput
from gemkd.students.mlp_student import MLPStudent
from gemkd.transfer.packs import stacked_students

TASKS = ["click", "conversion"]
RATES = {"click": 0.06, "conversion": 0.004}
#: what a pack must give each member exactly as its run alone does
SAME = ("metrics", "coverage")


class UnusedParamStudent(MLPStudent):
    """An MLP student with a parameter that never gets a gradient: AdamW leaves it alone in a
    run; a pack cannot take its step (every trained parameter every step) and runs it alone."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.unused = nn.Parameter(torch.zeros(3))

    def forward(self, batch, features=None) -> StudentOutput:
        return super().forward(batch, features)


def _spec(student: dict, **keys):
    return spec_from_mapping({
        "name": "packs", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
        "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6],
        "student": student, "student_tasks": TASKS, "variants": ["baseline"],
        "batch_size": 128, "ema_decay": 0.9, **keys})


def _run(spec, data, tmp_path, seed: int, params: dict, name: str) -> StudentRun:
    return StudentRun(key=f"final|baseline|{seed}|{name}", phase="final", spec=spec,
                      variant="baseline", params=params, seed=seed, lag=0, world=0,
                      train_days=(3, 5), eval_days=(5, 6), trained_until_day=2,
                      data=str(data), stores={}, base_rates=dict(RATES),
                      curve=str(tmp_path / name / "curve.csv"),
                      clusters=str(tmp_path / name / "clusters.npz"))


def _members(spec, data, tmp_path, where: str) -> list[StudentRun]:
    knobs = [{"lr": 0.01, "ema_decay": 0.9}, {"lr": 0.02, "ema_decay": 0.95},
             {"lr": 0.005, "ema_decay": 0.9}]
    return [_run(spec, data, tmp_path / where, s, k, f"m{s}") for s, k in enumerate(knobs)]


def _same_files(a: StudentRun, b: StudentRun) -> None:
    assert open(a.curve).read() == open(b.curve).read()
    with np.load(a.clusters) as x, np.load(b.clusters) as y:
        assert sorted(x.files) == sorted(y.files)
        for f in x.files:
            assert np.array_equal(x[f], y[f]), f


def _same_records(alone: list[dict], packed: list[dict], alone_runs: list[StudentRun],
                  packed_runs: list[StudentRun]) -> None:
    assert len(packed) == len(alone)
    for a, p, ra, rp in zip(alone, packed, alone_runs, packed_runs, strict=True):
        assert set(p) == set(a)  # runs.jsonl's record, the same keys
        assert p["metrics"] == a["metrics"]  # NE, AUC, calibration: bit for bit
        assert p["coverage"] == a["coverage"] or (np.isnan(p["coverage"])
                                                  and np.isnan(a["coverage"]))
        _same_files(ra, rp)


@pytest.mark.parametrize("table_optimizer", ["dense_adamw", "rowwise_adagrad", "sparse_adam"])
def test_each_member_of_a_batched_pack_is_its_run_alone(tiny_data, tmp_path, table_optimizer):
    """Under every table optimiser (row-wise tables and their lazy average included)."""
    spec = _spec({"class_path": "mlp", "init_args": {"hidden": [8]}},
                 table_optimizer=table_optimizer, table_min_rows=0)
    alone_runs = _members(spec, tiny_data, tmp_path, "alone")[:2]
    packed_runs = _members(spec, tiny_data, tmp_path, "pack")[:2]
    alone: list[dict] = []  # each alone as a sweep at pack size 1 runs it: a pack of one
    executors.Serial(1, pack_size=1).run(alone_runs, lambda run, res: alone.append(res))
    packed = execute_pack(packed_runs)  # batched, the default
    _same_records(alone, packed, alone_runs, packed_runs)
    # the members did differ: seeds and knobs give other numbers
    assert len({p["metrics"]["ne/click/all"] for p in packed}) == 2


def test_each_member_of_an_exact_pack_is_its_lightning_run(tiny_data, tmp_path):
    spec = _spec({"class_path": "mlp", "init_args": {"hidden": [8]}})
    alone_runs = _members(spec, tiny_data, tmp_path, "alone")[:2]
    packed_runs = _members(spec, tiny_data, tmp_path, "pack")[:2]
    alone = [execute(r) for r in alone_runs]  # Lightning's loop
    _same_records(alone, execute_pack(packed_runs, batched=False), alone_runs, packed_runs)


def test_a_student_that_cannot_be_stacked_runs_through_lightning(tiny_data, tmp_path, caplog):
    spec = _spec({"class_path": f"{__name__}.UnusedParamStudent", "init_args": {"hidden": [8]}})
    runs = _members(spec, tiny_data, tmp_path, "pack")[:2]
    with caplog.at_level(logging.WARNING, logger="gemkd.experiments.run.packs"):
        packed = execute_pack(runs)
    assert "trains each as a pack of one" in caplog.text
    assert "run trains alone through Lightning" in caplog.text and "no gradient" in caplog.text
    alone = [execute(r) for r in _members(spec, tiny_data, tmp_path, "alone")[:2]]
    assert [p["metrics"] for p in packed] == [a["metrics"] for a in alone]


def test_a_tracked_run_trains_through_lightning(tiny_data, tmp_path, monkeypatch, caplog):
    spec = _spec({"class_path": "mlp", "init_args": {"hidden": [8]}})
    runs = [dataclasses.replace(r, tracker=object())
            for r in _members(spec, tiny_data, tmp_path, "x")[:2]]
    seen: list[str] = []
    monkeypatch.setattr(packs, "execute", lambda run: seen.append(run.key) or {"key": run.key})
    with caplog.at_level(logging.INFO, logger="gemkd.experiments.run.packs"):
        assert execute_pack(runs) == [{"key": r.key} for r in runs]
        assert run_alone(runs[0]) == {"key": runs[0].key}
    assert seen == [runs[0].key, runs[1].key, runs[0].key]
    assert "through Lightning: a tracker" in caplog.text


def test_runs_group_by_what_they_share(tiny_data, tmp_path):
    spec = _spec({"class_path": "mlp", "init_args": {"hidden": [8]}})
    runs = _members(spec, tiny_data, tmp_path, "x")
    wide = dataclasses.replace(runs[0], key="wide", params={"adapter_hidden": 8})
    other_days = dataclasses.replace(runs[1], key="days", train_days=(3, 4))
    other_student = dataclasses.replace(runs[2], key="student", spec=_spec(
        {"class_path": "mlp", "init_args": {"hidden": [4]}}))
    tracked = dataclasses.replace(runs[0], key="tracked", tracker=object())
    all_runs = [*runs, wide, other_days, other_student, tracked]
    packs = group_packs(all_runs, 16)
    assert [[r.key for r in p] for p in packs] == [
        [r.key for r in runs], ["wide"], ["days"], ["student"], ["tracked"]]
    assert pack_key(tracked) is None
    assert [len(p) for p in group_packs(runs, 2)] == [2, 1]
    assert [len(p) for p in group_packs(all_runs, 1)] == [1] * len(all_runs)
    with pytest.raises(ValueError, match="pack size"):
        group_packs(runs, 0)


def test_the_executors_take_a_pack_size(tmp_path):
    assert executors.make_executor(workers=1).pack_size == 16
    assert executors.make_executor(workers=1, pack_size=1).pack_size == 1
    with pytest.raises(Exception, match="--pack-size"):
        executors.make_executor(workers=1, pack_size=0)


# ---------------------------------------------------------------- every built-in variant
BUILTIN = ["baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr", "hierarchical", "full",
           "kd_share", "kd_cal", "kd_adapter_cal", "kd_solaris", "full_solaris"]
#: the built-ins and a variant whose features have parameters of their own (attention pooling:
#: each member's features, vmapped, feed the stacked student)
VARIANTS = [*BUILTIN, "kd_repr_attention"]
SPEC = {
    "name": "packrun", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 30}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": TASKS, "ema_decay": 0.9, "tuning": {"trials": 1},
    "variants": {**{v: BUILTIN_VARIANTS[v] for v in BUILTIN}, "kd_repr_attention": [
        "kd", {"class_path": "repr", "init_args": {"pooling": "attention"}}]},
    "hierarchical": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 20}},
    "repr": {"layer": "trunk", "code_dim": 4, "bits": 8, "max_events": 20, "epochs": 2},
    "solaris": {"k": 4},
}
#: three members per variant: other seeds and every float knob the variant has set otherwise
KNOBS = [{}, {"alpha": 0.3, "temperature": 2.0, "aux_beta": 0.5, "lr": 0.02, "ema_decay": 0.95},
         {"alpha": 0.8, "lr": 0.005}]


@pytest.fixture(scope="module")
def final_runs(tmp_path_factory):
    """The final runs of a tiny sweep of every built-in variant (run alone, pack size 1)."""
    from gemkd.experiments.cli import main

    tmp = tmp_path_factory.mktemp("packrun")
    (tmp / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    seen: list[StudentRun] = []
    original = executors.Serial.run

    def record(self, runs, done):
        seen.extend(runs)
        original(self, runs, done)

    mp = pytest.MonkeyPatch()
    mp.setattr(executors.Serial, "run", record)
    try:
        assert main(["run", str(tmp / "spec.yaml"), "--out", str(tmp / "out"), "--threads", "1",
                     "--workers", "1", "--pack-size", "1"]) == 0
    finally:
        mp.undo()
    return {r.variant: pickle.loads(pickle.dumps(r)) for r in seen if r.phase == "final"}, tmp


@pytest.mark.slow
@pytest.mark.parametrize(("batched", "table_optimizer"),
                         [(True, "dense_adamw"), (False, "dense_adamw"), (True, "sparse_adam")],
                         ids=["batched", "exact", "batched_row_wise"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_packs_to_its_runs_alone(final_runs, variant, batched, table_optimizer,
                                               caplog):
    """Row-wise: every table of the tiny world updated row-wise (table_min_rows 0)."""
    runs, tmp = final_runs
    base = runs[variant]
    if table_optimizer != "dense_adamw":
        base = dataclasses.replace(base, spec=dataclasses.replace(
            base.spec, table_optimizer=table_optimizer, table_min_rows=0))
    members = []
    for seed, knobs in enumerate(KNOBS):
        params = {**base.params, **{k: v for k, v in knobs.items() if k in base.params}}
        members.append(dataclasses.replace(base, seed=seed, params=params,
                                           key=f"{variant}{seed}"))
    assert len({tuple(sorted(m.params.items())) for m in members}) == 3
    assert len({pack_key(m) for m in members}) == 1
    mode = ("batched" if batched else "exact") + f"_{table_optimizer}"

    def where(name: str) -> list[StudentRun]:
        return [dataclasses.replace(m, curve=str(tmp / mode / name / variant / f"{m.seed}.csv"),
                                    clusters=str(tmp / mode / name / variant / f"{m.seed}.npz"))
                for m in members]

    alone_runs, packed_runs = where("alone"), where("pack")
    # a run alone: a batched pack of one (batched), Lightning's loop (exact)
    alone = [run_alone(r) if batched else execute(r) for r in alone_runs]
    calls: list[int] = []
    stacked = stacked_students.mlp_student

    def counted(student, params, batch, features=None):
        calls.append(next(iter(params.values())).shape[0])
        return stacked(student, params, batch, features)

    mp = pytest.MonkeyPatch()
    mp.setitem(stacked_students._REGISTRY, MLPStudent, counted)
    try:
        with caplog.at_level(logging.INFO, logger="gemkd.experiments.run.packs"):
            packed = execute_pack(packed_runs, batched=batched)
    finally:
        mp.undo()
    assert "pack of one" not in caplog.text and "through Lightning" not in caplog.text
    # batched: the members' student ran stacked, all three at once; exact: each its own
    assert (set(calls) == {3}) if batched else not calls
    _same_records(alone, packed, alone_runs, packed_runs)


def _pack(runs: list[StudentRun], batched: bool):
    """The members of ``runs`` built as a pack builds them, a PackedDistill of them and the
    pack's first training batches."""
    import lightning.pytorch as pl

    from gemkd.experiments.run.jobs import _inputs
    from gemkd.experiments.run.student import StudentJob, build_module, student_datamodule
    from gemkd.experiments.run.train_knobs import with_train_knobs
    from gemkd.transfer.io import fs
    from gemkd.transfer.packs.pack import PackedDistill

    modules, decays = [], []
    for r in runs:
        spec = with_train_knobs(r.spec, r.params)
        job = StudentJob(spec.variant(r.variant), dict(r.params), r.seed, r.train_days,
                         r.eval_days, r.trained_until_day)
        pl.seed_everything(r.seed, verbose=False)
        module, _ = build_module(spec, job, fs.as_where(r.data), _inputs(r), dict(r.base_rates))
        modules.append(module)
        decays.append(spec.ema_decay)
    dm = student_datamodule(spec, job, fs.as_where(runs[0].data), modules[0].model)
    batches = [b for _, b in zip(range(4), dm.train_dataloader(), strict=False)]
    return PackedDistill(modules, decays, batched=batched), batches


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_stacked_step_is_each_members_own_step(final_runs, variant):
    """The stacked step (the student's stacked forward, the methods' hooks once for all
    members, the fused AdamW) computes each member's own step: its losses and weights equal
    the exact pack's (each member's own modules and ops) to rounding."""
    runs, _ = final_runs
    base = runs[variant]
    members = [dataclasses.replace(base, seed=s, key=f"{variant}{s}", params={
        **base.params, **{k: v for k, v in KNOBS[s].items() if k in base.params}})
        for s in range(3)]
    stacked, batches = _pack(members, batched=True)
    exact, _ = _pack(members, batched=False)
    assert stacked._stacked is not None
    assert stacked._stacked_step  # every built-in method stacks
    for batch in batches:
        torch.testing.assert_close(stacked.train_step(batch), exact.train_step(batch),
                                   rtol=1e-5, atol=1e-6)
    for name, p in stacked.params.items():
        torch.testing.assert_close(p, exact.params[name], rtol=1e-4, atol=1e-5, msg=name)

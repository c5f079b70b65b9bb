"""The built-in ``kd_share`` variant (KD + param_share): a run trains it with the lag's teacher
checkpoint, its students start from the teacher's tables, and an imported store (no
checkpoint) is refused up front, naming the variant."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import yaml

from gemkd.adapters.methods import ParamShare
from gemkd.adapters.methods.param_share import fit_width, teacher_table
from gemkd.experiments.run import executors
from gemkd.experiments.run.jobs import StudentRun, _inputs
from gemkd.experiments.run.preflight import check_spec
from gemkd.experiments.run.student import StudentJob, build_module
from gemkd.experiments.spec import BUILTIN_VARIANTS, DEFAULT_VARIANTS, RunSpec, spec_from_mapping
from gemkd.experiments.teacher.teacher_checkpoint import model_weights
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io import fs
from gemkd.transfer.store import Manifest
from tests.faults.conftest import SPEC


def test_kd_share_is_built_in_but_not_a_default():
    spec = RunSpec(variants=["kd_share"])
    assert [m.class_path for m in spec.variant("kd_share").methods] == ["kd", "param_share"]
    assert "kd_share" in BUILTIN_VARIANTS and "kd_share" not in DEFAULT_VARIANTS
    assert RunSpec().variant_names == list(DEFAULT_VARIANTS)  # a spec naming none: unchanged


def test_an_imported_store_refuses_kd_share_naming_it(monkeypatch):
    monkeypatch.setattr(Manifest, "load", staticmethod(lambda where: None))  # a finished store

    def spec(variants: list[str]) -> RunSpec:
        return spec_from_mapping({**SPEC, "teacher": {"store": "/nowhere/store"},
                                  "variants": variants})

    with pytest.raises(ConfigError, match=r"spec variants: kd_share start the student from the "
                                          r"teacher's weights \(param_share\).*no checkpoint"):
        check_spec(spec(["kd", "kd_share"]))
    check_spec(spec(["kd"]))  # the same spec without it passes


@pytest.mark.slow
def test_a_kd_share_run_trains_from_the_teachers_tables(tmp_path, monkeypatch):
    from gemkd.experiments.cli import main

    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**SPEC,
                                                        "variants": ["kd", "kd_share"]}))
    seen: list[StudentRun] = []
    original = executors.Serial.run

    def record(self, runs, done):
        seen.extend(runs)
        original(self, runs, done)

    monkeypatch.setattr(executors.Serial, "run", record)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "spec.yaml"), "--out", str(out), "--threads", "1"]) == 0
    df = pd.read_csv(out / "results.csv")
    assert set(df["variant"]) == {"kd", "kd_share"} and df["ne"].notna().all()

    final = {r.variant: r for r in seen if r.phase == "final"}
    run = final["kd_share"]
    assert run.ckpt is not None and final["kd"].ckpt == run.ckpt  # the lag's GEM checkpoint
    weights = model_weights(run.ckpt)

    def student_tables(r: StudentRun) -> tuple[dict[str, torch.Tensor], list]:
        job = StudentJob(r.spec.variant(r.variant), dict(r.params), r.seed,
                         tuple(r.train_days), tuple(r.eval_days), r.trained_until_day)
        torch.manual_seed(r.seed)
        module, _ = build_module(r.spec, job, fs.as_where(r.data), _inputs(r),
                                 dict(r.base_rates))
        tables = {k: t.weight.detach().clone()
                  for k, t in module.model.embedding_tables().items()}
        return tables, list(module.methods)

    shared_tables, methods = student_tables(run)
    (share,) = [m for m in methods if isinstance(m, ParamShare)]
    assert share.shared  # at least one table copied
    for name in share.shared:
        src = teacher_table(weights, name)
        dst = shared_tables[name]
        rows = torch.arange(dst.shape[0]) % src.shape[0]
        assert torch.equal(dst, fit_width(src, dst.shape[1])[rows].to(dst.dtype)), name
    plain_tables, _ = student_tables(final["kd"])  # plain KD's student starts elsewhere
    assert not any(torch.equal(plain_tables[n], shared_tables[n]) for n in share.shared)

"""``gemkd run`` end to end on the tiny world: every step, the results table, caching."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.run.domain_fm_step import PerDomainModels, fit_domain_fms
from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.run.results import RESULT_COLUMNS, derive
from gemkd.experiments.run.teacher_steps import teacher_config
from gemkd.experiments.spec import TeacherSpec, apply_sets, load_spec, parse_set
from gemkd.transfer.data.dataset_writer import day_path
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import TeacherOutput
from gemkd.transfer.store import TeacherStore

SPEC = {
    "name": "tinyrun", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 30}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click", "conversion"],
    "variants": ["baseline", "kd", "full"],  # full = aux head + LoopFM codes
    "tuning": {"knobs": {"kd_weight": [0.5, 2.0], "temperature": [1.0], "aux_beta": [1.0],
                         "adapter_hidden": [8], "lr": [0.01]}},
    "repr": {"layer": "trunk", "code_dim": 4, "bits": 8, "max_events": 20, "epochs": 2},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp / "out"
    assert main(["run", str(spec), "--out", str(out)]) == 0
    return spec, out


def test_results_table(run):
    _, out = run
    df = pd.read_csv(out / "results.csv")
    assert list(df.columns) == RESULT_COLUMNS
    # 3 variants x 1 seed x (3 domains + all) x 2 tasks
    assert len(df) == 3 * 4 * 2
    assert set(df.variant) == set(SPEC["variants"])
    allc = df[(df.domain == "all") & (df.task == "click")].set_index("variant")
    assert allc.loc["baseline", "delta_ne"] == 0
    kd = allc.loc["kd"]
    assert kd["delta_ne"] == pytest.approx(kd["ne_baseline"] - kd["ne"])
    assert kd["transfer_ratio"] == pytest.approx(
        kd["delta_ne"] / (kd["ne_baseline"] - kd["ne_teacher"]))
    if kd["delta_ne"] > 0:
        assert kd["efficiency_vs_kd"] == pytest.approx(1.0)
    else:  # a ratio to a KD "gain" that is not one is left undefined
        assert pd.isna(kd["efficiency_vs_kd"])
    assert (df.ne_oracle < df.ne_teacher).all()  # the oracle is the best any model can do
    tuning = pd.read_csv(out / "tuning.csv")
    chosen = tuning[(tuning.variant == "kd") & tuning.chosen & (tuning.param == "kd_weight")]
    assert len(chosen) == 1 and chosen.value.iloc[0] in (0.5, 2.0)
    for name in ("spec.yaml", "environment.json", "log.txt", "command.txt", "report.md"):
        assert (out / name).is_file(), name
    assert (out / "curves" / "kd_seed0_lag0.csv").is_file()
    assert (out / "plots" / "ne_by_variant.png").is_file()


def test_efficiency_is_undefined_where_kd_does_not_gain():
    rows = []
    for seed, kd_ne in ((0, 0.90), (1, 0.96)):  # KD gains 0.05 on seed 0, loses 0.01 on seed 1
        for variant, ne in (("baseline", 0.95), ("kd", kd_ne), ("full", 0.88)):
            rows.append({"variant": variant, "seed": seed, "domain": "all", "task": "click",
                         "teacher_lag_days": 0, "ne": ne, "auc": 0.7, "calibration": 1.0,
                         "ne_teacher": 0.8, "ne_source": 0.8, "ne_oracle": 0.7,
                         "ne_feature_oracle": 0.75,
                         "train_seconds": 1.0, "examples_per_second": 1.0})
    df = derive(pd.DataFrame(rows)).set_index(["variant", "seed"])
    assert df.loc[("full", 0), "efficiency_vs_kd"] == pytest.approx(0.07 / 0.05)
    assert df.loc[("kd", 0), "efficiency_vs_kd"] == pytest.approx(1.0)
    assert pd.isna(df.loc[("full", 1), "efficiency_vs_kd"])
    assert df.loc[("full", 1), "delta_ne"] == pytest.approx(0.07)
    assert df.loc[("full", 1), "transfer_ratio"] == pytest.approx(0.07 / 0.15)


def test_transfer_ratio_is_undefined_where_the_teacher_is_within_noise():
    rows = []
    for seed, base in ((0, 0.95), (1, 0.90), (2, 0.85)):  # baseline seed std 0.05
        for variant, ne in (("baseline", base), ("kd", base - 0.01)):
            rows.append({"variant": variant, "seed": seed, "domain": "all", "task": "click",
                         "teacher_lag_days": 0, "ne": ne, "auc": 0.7, "calibration": 1.0,
                         "ne_teacher": 0.85, "ne_source": 0.85, "ne_oracle": 0.7,
                         "ne_feature_oracle": 0.75,
                         "train_seconds": 1.0, "examples_per_second": 1.0})
    df = derive(pd.DataFrame(rows))
    assert df["transfer_ratio"].isna().all()  # ΔNE_FM 0.05 < 2 × 0.05
    assert df[df.variant == "kd"]["delta_ne"].tolist() == pytest.approx([0.01] * 3)


def test_rerun_reuses_every_step(run, capsys):
    spec, out = run
    before = pd.read_csv(out / "results.csv")
    assert main(["run", str(spec), "--out", str(out)]) == 0
    log = capsys.readouterr().out
    for step in ("data", "teacher", "store", "codes"):
        assert f"[cached] {step}" in log
    assert "[run]" not in log
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), before)
    assert main(["report", str(out)]) == 0


def test_spec_sets_and_errors(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    loaded = load_spec(spec, ["data.overrides.seed=7", "data.overrides.drift=0.5", "seeds=[1,2,3]"])
    assert loaded.seeds == [1, 2, 3]
    assert loaded.data.overrides["seed"] == 7 and loaded.data.overrides["drift"] == 0.5
    assert apply_sets({"a": {"b": 1}}, parse_set(["a.c=[1, 2]"]), "x") == {
        "a": {"b": 1, "c": [1, 2]}}
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_set(["seeds"])
    deep = load_spec(spec, ["student.init_args.embedding_dim=4",
                            "hierarchical.overrides.init_from=gem"])
    assert deep.student.init_args["embedding_dim"] == 4
    assert deep.hierarchical.overrides["init_from"] == "gem"
    with pytest.raises(ConfigError, match=r"'a.b' in x is 1, not a mapping"):
        apply_sets({"a": {"b": 1}}, parse_set(["a.b.c=2"]), "x")
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--set", "variants=[kd, boosted]"]) == 2
    assert "unknown variant 'boosted'" in capsys.readouterr().err
    assert main(["run", str(spec), "--out", str(out), "--set", "studnet=mlp"]) == 2
    assert "unknown key 'studnet'" in capsys.readouterr().err
    assert main(["run", str(spec), "--out", str(out), "--set", "ema_decay=1.5"]) == 2
    assert "'ema_decay' must be in (0, 1)" in capsys.readouterr().err
    assert not out.exists()


def test_ema_evaluates_averaged_weights(run, tmp_path):
    """With ema_decay the evaluated student is the moving average, not the last step: the same
    seed gives different metrics; a rerun with the same decay gives the same ones."""
    spec_path, out = run
    base = pd.read_csv(out / "results.csv")
    ema_out = tmp_path / "ema"
    args = ["run", str(spec_path), "--out", str(ema_out), "--set", "ema_decay=0.9",
            "--set", "tuning.knobs.ema_decay=[0.9]", "--set", "variants=[baseline]"]
    assert main(args) == 0
    ema = pd.read_csv(ema_out / "results.csv")
    key = (base.variant == "baseline") & (base.domain == "all")
    assert not np.allclose(base[key]["ne"].to_numpy(), ema[ema.domain == "all"]["ne"].to_numpy())


def test_per_domain_models_answer_each_row_with_its_domains_model():
    class Const(torch.nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.value = value

        def forward(self, batch):
            n = len(batch.domain)
            return TeacherOutput(logits=torch.full((n, 2), self.value),
                                 repr={"trunk": torch.full((n, 3), -self.value)})

    model = PerDomainModels({0: Const(1.0), 2: Const(5.0)})
    out = model(SimpleNamespace(domain=torch.tensor([2, 0, 2, 0])))
    assert out.logits[:, 0].tolist() == [5.0, 1.0, 5.0, 1.0]
    assert out.repr["trunk"][:, 2].tolist() == [-5.0, -1.0, -5.0, -1.0]


def test_domain_fm_is_trained_and_exported_per_domain(run):
    spec_path, out = run
    spec = load_spec(spec_path, [])
    data = next((out / "cache").glob("data-*")) / "data"
    gem_store = next((out / "cache").glob("store-*")) / "store"
    cfg = teacher_config(spec, 0, TeacherSpec("domain_fm", overrides={"max_seq_len": 32,
                                                                      "max_steps": 5}),
                         plan_run(spec).val_days)
    schema = DatasetSchema.load(data)
    counts = {d: 0 for d in schema.domains}
    for day in schema.days:
        dom = pq.read_table(day_path(data, day), columns=["domain"]).column("domain")
        for k, name in enumerate(schema.domains):
            counts[name] += int(pc.sum(pc.equal(dom, k)).as_py() or 0)
    logs: list[str] = []
    one = fit_domain_fms(cfg, data, {"k": 1}, gem_store, ["stories"], out / "fmcache", logs.append)
    two = fit_domain_fms(cfg, data, {"k": 1}, gem_store, ["feed", "stories"], out / "fmcache",
                         logs.append)
    assert one != two  # the domain list is part of the step's key
    s1, s2 = TeacherStore(one), TeacherStore(two)
    assert s1.num_rows == counts["stories"]
    assert s2.num_rows == counts["feed"] + counts["stories"]
    assert "[stories]" in s1.manifest.teacher_name
    assert sum("domain FM" in line for line in logs) == 3  # one FM per domain, per call
    t1 = s1.read(None, ["example_id", "domain", *s1.logit_columns])
    assert set(t1.column("domain").to_pylist()) == {schema.domains.index("stories")}
    assert np.isfinite(s1.logits(t1)).all()
    # each FM is a teacher fit of its own, every key of its config honoured (max_steps: 5)
    fits = sorted(one.parent.glob("fit/*/val_metrics.json"))
    assert [p.parent.name for p in fits] == ["stories"]
    assert json.loads(fits[0].read_text())["global_step"] == 5

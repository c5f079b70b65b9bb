"""A kept student exported as an artifact predicts what the run evaluated, impression by
impression (every built-in student, the EMA's weights), through its torch.export program and
its rebuilt module; a tampered or missing artifact, or an ambiguous export, is one clear
error; an export leaves nothing behind when it fails."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gemkd.experiments.artifacts import StudentArtifact, export_student, score_artifact
from gemkd.experiments.run import packs
from gemkd.experiments.run.jobs import StudentRun
from gemkd.experiments.run.kept_students import median_seed
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TASKS = ["click", "conversion"]
RATES = {"click": 0.06, "conversion": 0.004}
STUDENTS = {"mlp": {"hidden": [16]}, "dcn": {"hidden": [16], "n_cross": 2},
            "seq_pool": {"hidden": [16]}}


def _spec(student: str):
    return spec_from_mapping({
        "name": "artifacts", "seeds": [0, 1], "data": {"source": "synthetic", "preset": "tiny"},
        "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6],
        "student": {"class_path": student, "init_args": STUDENTS[student]},
        "student_tasks": TASKS, "variants": ["baseline"], "batch_size": 128,
        "ema_decay": 0.9, "keep_students": "all"})


def _runs(spec, data, run: RunDir) -> list[StudentRun]:
    return [StudentRun(key=f"final|baseline|{s}|0", phase="final", spec=spec,
                       variant="baseline", params={"lr": lr, "ema_decay": 0.9}, seed=s, lag=0,
                       world=0, train_days=(3, 5), eval_days=(5, 6), trained_until_day=2,
                       data=str(data), stores={}, base_rates=dict(RATES),
                       student=str(run.student_path(0, 0, "baseline", s)))
            for s, lr in ((0, 0.01), (1, 0.02))]


@pytest.fixture
def evaluated(monkeypatch):
    """Every member's evaluated logits as the run computed them, ``[K, N]`` per pack."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = packs._evaluate_at_once

    def spy(pack, modules, sums, batches):
        batches = list(batches)
        seen.append((torch.cat([b.example_id for b in batches]),
                     torch.cat([pack.serving_logits(b) for b in batches], dim=1)))
        return original(pack, modules, sums, batches)

    monkeypatch.setattr(packs, "_evaluate_at_once", spy)
    return seen


def same(logits: torch.Tensor, reference: torch.Tensor) -> None:
    """Predictions equal to 1e-6: the probabilities absolutely, the logits relatively (a
    float32 logit of -11 has a rounding step of 1e-6; the run's stacked kernels and the
    program's add in other orders)."""
    torch.testing.assert_close(torch.sigmoid(logits), torch.sigmoid(reference), rtol=0,
                               atol=1e-6)
    torch.testing.assert_close(logits, reference, rtol=1e-6, atol=1e-6)


def _eval_batches(art: StudentArtifact, data):
    return DatasetReader(data, days=(5, 6), batch_size=97, tasks=TASKS, oracle=False,
                         sequence=art.sequence, max_seq_len=art.max_seq_len)


@pytest.mark.parametrize("student", sorted(STUDENTS))
def test_round_trip_every_builtin_student(student, tiny_data, tmp_path, evaluated):
    run = RunDir(tmp_path / "run")
    records = packs.execute_pack(_runs(_spec(student), tiny_data, run))
    (ids, logits), = evaluated
    assert not torch.equal(logits[0], logits[1])  # two students, told apart
    for seed in (1,):  # the pack's second member: its own slice of the stacked weights
        out = export_student(run.path, "baseline", tmp_path / f"art{seed}", seed=seed)
        art = StudentArtifact(out)
        assert art.meta["seed"] == seed and art.meta["student"]["class_path"] == student
        assert art.meta["inputs"]["vocabularies"] is None  # synthetic ids are codes already
        with pytest.raises(ConfigError, match="synthetic dataset has no raw ids"):
            art.encode_raw("user_id", [1])
        assert art.meta["metrics"]["ne/click/all"] == pytest.approx(
            float(records[seed]["metrics"]["ne/click/all"]), abs=1e-12)
        got_ids, got, eager = [], [], []
        model = art.model()
        for batch in _eval_batches(art, tiny_data):
            got_ids.append(batch.example_id)
            got.append(art.predict(batch))
            with torch.no_grad():
                eager.append(model(*art.inputs(batch)))
        got_ids_t = torch.cat(got_ids)
        assert torch.equal(got_ids_t, ids)  # the same rows, in the run's order
        run_logits = logits[seed]
        for mine in (torch.cat(got), torch.cat(eager)):  # the program's and the module's
            same(mine, run_logits)
    # scoring reads the same rows and gives the run's metrics
    metrics = score_artifact(tmp_path / "art1", tiny_data, (5, 6), tmp_path / "s.parquet")
    for key in ("ne/click/all", "auc/click/all", "calibration/conversion/all"):
        assert metrics[key] == pytest.approx(float(records[1]["metrics"][key]), abs=1e-6)


def test_the_ema_weights_are_kept_not_the_last_step(tiny_data, tmp_path):
    """The kept student is the weight average the run evaluated: its NE is the run's, and
    the last step's weights (the same run without an average) differ from it."""
    run = RunDir(tmp_path / "run")
    spec = _spec("mlp")
    runs = _runs(spec, tiny_data, run)[:1]
    packs.execute_pack(runs)
    kept = torch.load(runs[0].student, weights_only=True)
    assert kept["ema_decay"] == 0.9
    plain = RunDir(tmp_path / "plain")
    last = [StudentRun(**{**r.__dict__, "params": {"lr": 0.01},
                          "spec": spec_from_mapping({**spec.to_dict(), "ema_decay": None}),
                          "student": str(plain.student_path(0, 0, "baseline", 0))})
            for r in runs]
    packs.execute_pack(last)
    other = torch.load(last[0].student, weights_only=True)
    w = "model.head.weight"
    assert not torch.equal(kept["state_dict"][w], other["state_dict"][w])


def test_median_seed():
    assert median_seed({0: 0.5, 1: 0.3, 2: 0.4}) == 2
    assert median_seed({0: 0.5, 1: 0.3, 2: 0.4, 3: 0.1}) == 1  # the lower median
    assert median_seed({0: float("nan"), 1: 0.3, 2: 0.4}) == 2  # NaN counts as worst
    assert median_seed({4: 0.2, 3: 0.2}) == 3


def test_export_errors_name_what_was_kept(tiny_data, tmp_path):
    run = RunDir(tmp_path / "run")
    packs.execute_pack(_runs(_spec("mlp"), tiny_data, run))
    with pytest.raises(ConfigError, match="2 kept students of variant 'baseline' match.*"
                                          "--seed"):
        export_student(run.path, "baseline", tmp_path / "a")
    with pytest.raises(ConfigError, match="no kept student of variant 'kd'; the run kept: "
                                          "baseline seed 0 lag 0 world 0, baseline seed 1"):
        export_student(run.path, "kd", tmp_path / "a")
    assert not (tmp_path / "a").exists()
    out = export_student(run.path, "baseline", tmp_path / "a", seed=0)
    with pytest.raises(Exception, match="already exists"):
        export_student(run.path, "baseline", out, seed=1)
    assert StudentArtifact(out).meta["seed"] == 0  # untouched
    export_student(run.path, "baseline", out, seed=1, overwrite=True)
    assert StudentArtifact(out).meta["seed"] == 1
    # a failed export (weights that do not fit the config) leaves no folder behind
    kept = run.kept_students()[0]
    payload = torch.load(kept.path, weights_only=True)
    payload["student"]["init_args"]["hidden"] = [7]
    torch.save(payload, kept.path)
    with pytest.raises(ConfigError, match="weights do not fit the student"):
        export_student(run.path, "baseline", tmp_path / "b", seed=0)
    assert not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_changed_artifact_is_refused(tiny_data, tmp_path):
    run = RunDir(tmp_path / "run")
    packs.execute_pack(_runs(_spec("mlp"), tiny_data, run)[:1])
    out = export_student(run.path, "baseline", tmp_path / "a")
    weights = out / "weights.pt"
    weights.write_bytes(weights.read_bytes() + b"x")
    with pytest.raises(ConfigError, match=r"weights\.pt: sha256 does not match"):
        StudentArtifact(out)
    (out / "artifact.json").unlink()
    with pytest.raises(ConfigError, match="no artifact.json: not a student artifact"):
        StudentArtifact(out)


def test_the_input_contract_is_written(tiny_data, tmp_path):
    run = RunDir(tmp_path / "run")
    packs.execute_pack(_runs(_spec("seq_pool"), tiny_data, run)[:1])
    out = export_student(run.path, "baseline", tmp_path / "a")
    meta = json.loads((out / "artifact.json").read_text())
    schema = json.loads((out / "schema.json").read_text())
    inputs = meta["inputs"]
    assert inputs["order"] == ["dense", "categorical", "domain", "seq_offsets", "seq_values"]
    assert inputs["categorical"]["columns"] == [f["name"] for f in schema["categorical"]]
    assert inputs["categorical"]["cardinality"] == [f["cardinality"]
                                                    for f in schema["categorical"]]
    assert inputs["sequence"] and inputs["max_seq_len"] == 20
    assert meta["codes"] is None and meta["student"]["init_args"] == STUDENTS["seq_pool"]
    assert set(meta["files"]) == {"schema.json", "weights.pt", "program.pt2"}
    assert np.isfinite(meta["metrics"]["ne/click/all"])


def test_a_run_through_lightning_keeps_its_evaluated_weights(tiny_data, tmp_path):
    """A run alone through Lightning (a tracker, an accelerator, an unstackable student) keeps
    the module it evaluated, its weight average in place: the artifact scores the run's NE."""
    from gemkd.experiments.run.jobs import execute

    run = RunDir(tmp_path / "run")
    (one,) = _runs(_spec("mlp"), tiny_data, run)[:1]
    record = execute(one)
    out = export_student(run.path, "baseline", tmp_path / "a")
    metrics = score_artifact(out, tiny_data, (5, 6), tmp_path / "s.parquet")
    for key in ("ne/click/all", "ne/conversion/all", "auc/click/all"):
        assert metrics[key] == pytest.approx(float(record["metrics"][key]), abs=1e-6)


def test_histories_longer_than_the_contract_are_cut_on_the_host(tiny_data, tmp_path):
    """A batch read without the artifact's cut (every event, every field) scores as the cut
    one does: the host keeps the most recent max_seq_len events before the program runs."""
    run = RunDir(tmp_path / "run")
    packs.execute_pack(_runs(_spec("seq_pool"), tiny_data, run)[:1])
    art = StudentArtifact(export_student(run.path, "baseline", tmp_path / "a"))
    cut = next(iter(_eval_batches(art, tiny_data)))
    whole = next(iter(DatasetReader(tiny_data, days=(5, 6), batch_size=97, tasks=TASKS,
                                    oracle=False)))
    assert whole.seq_max_len > art.max_seq_len >= cut.seq_max_len
    torch.testing.assert_close(art.predict(whole), art.predict(cut), rtol=0, atol=0)

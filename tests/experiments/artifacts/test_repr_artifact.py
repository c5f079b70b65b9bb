"""``gemkd run`` keeps each variant's median-NE student; ``gemkd student export`` of a student
that reads LoopFM codes (kd_repr: mean pooling; and attention pooling) carries its code table,
and ``gemkd score`` on the run's evaluation days gives the run's predictions and metrics."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from gemkd.experiments.artifacts import StudentArtifact
from gemkd.experiments.cli import main
from gemkd.experiments.run import packs
from gemkd.experiments.run.kept_students import median_seed
from gemkd.experiments.run.runner import run_experiment
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.transfer.repr_features import CodeStore
from tests.experiments.artifacts.test_student_export import same

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = {
    "name": "repr-artifact", "seeds": [0, 1],
    "data": {"source": "synthetic", "preset": "tiny",
             "overrides": {"examples_per_day": 1000, "n_users": 300, "history_days": 5}},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 16, "max_steps": 8}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [8]}},
    "student_tasks": ["click", "conversion"], "ema_decay": 0.9, "tuning": {"trials": 1},
    "variants": {"kd_repr": ["kd", "repr"], "kd_repr_attention": [
        "kd", {"class_path": "repr", "init_args": {"pooling": "attention"}}]},
    "repr": {"layer": "trunk", "code_dim": 4, "bits": 8, "max_events": 20, "epochs": 2},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The run, and every final student's evaluated logits as the run computed them."""
    tmp = tmp_path_factory.mktemp("repr-artifact")
    seen: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}
    current: list = []
    train, evaluate = packs._train_pack, packs._evaluate_at_once

    def train_spy(runs, batched=False):
        current[:] = runs
        return train(runs, batched)

    def eval_spy(pack, modules, sums, batches):
        batches = list(batches)
        ids = torch.cat([b.example_id for b in batches])
        logits = torch.cat([pack.serving_logits(b) for b in batches], dim=1)
        for k, r in enumerate(current):
            if r.phase == "final":
                seen[r.variant, r.seed] = (ids, logits[k])
        return evaluate(pack, modules, sums, batches)

    mp = pytest.MonkeyPatch()
    mp.setattr(packs, "_train_pack", train_spy)
    mp.setattr(packs, "_evaluate_at_once", eval_spy)
    n = torch.get_num_threads()
    try:
        run_experiment(spec_from_mapping(SPEC), tmp / "out")
    finally:
        mp.undo()
        torch.set_num_threads(n)
    return RunDir(tmp / "out"), seen


def test_the_median_student_of_each_variant_is_kept(run):
    rundir, seen = run
    finals = {(f.variant, f.seed): f.record["metrics"]["ne/click/all"]
              for f in rundir.final_runs()}
    kept = rundir.kept_students()
    assert [(k.variant, k.lag, k.world) for k in kept] == [("kd_repr", 0, 0),
                                                           ("kd_repr_attention", 0, 0)]
    for k in kept:
        assert k.seed == median_seed({s: ne for (v, s), ne in finals.items() if v == k.variant})
    assert len(seen) == 4  # every final student's logits were seen


@pytest.mark.parametrize("variant", ["kd_repr", "kd_repr_attention"])
def test_export_and_score_give_the_runs_predictions(run, variant, tmp_path, capsys):
    rundir, seen = run
    (kept,) = [k for k in rundir.kept_students() if k.variant == variant]
    art_dir = tmp_path / "art"
    assert main(["student", "export", str(rundir.path), "--variant", variant,
                 "--out", str(art_dir)]) == 0
    art = StudentArtifact(art_dir)
    assert art.meta["seed"] == kept.seed and art.has_codes
    codes = art.meta["codes"]
    assert codes["from_day"] == 5 and codes["max_events"] == 20
    assert codes["method"]["init_args"].get("pooling", "mean") == ("mean" if variant == "kd_repr"
                                                       else "attention")
    table, source = CodeStore(art_dir / "codes"), CodeStore(codes["source"])
    assert 0 < table.num_rows < source.num_rows  # the users' latest codes, not the store
    (data_dir,) = rundir.cache.glob("data-*/data")
    capsys.readouterr()
    scores = tmp_path / "scores.parquet"
    assert main(["score", str(art_dir), "--data", str(data_dir), "--days", "5:6",
                 "--out", str(scores)]) == 0
    printed = capsys.readouterr().out
    record = next(f.record for f in rundir.final_runs()
                  if (f.variant, f.seed) == (variant, kept.seed))
    for task in ("click", "conversion"):
        ne = record["metrics"][f"ne/{task}/all"]
        assert f"{task}: NE {ne:.4f}" in printed
    df = pd.read_parquet(scores)
    ids, logits = seen[variant, kept.seed]
    assert df["example_id"].tolist() == ids.tolist()
    mine = torch.tensor(df[["logit_click", "logit_conversion"]].to_numpy())
    same(mine, logits)
    torch.testing.assert_close(torch.tensor(df["p_click"].to_numpy()),
                               torch.sigmoid(mine[:, 0]), rtol=0, atol=1e-7)
    # days before the code table's first are refused: it lacks the users' earlier codes
    capsys.readouterr()
    assert main(["score", str(art_dir), "--data", str(data_dir), "--days", "4:6",
                 "--out", str(tmp_path / "early.parquet")]) == 2
    assert "its code table starts at day 5" in capsys.readouterr().err
    assert not (tmp_path / "early.parquet").exists()

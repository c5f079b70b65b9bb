"""``gemkd run`` end to end on the tiny world: every step, the results table, caching."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from experiments.cli import main
from experiments.run.runner import RESULT_COLUMNS
from experiments.run.spec import apply_sets, load_spec, parse_set
from transfer.errors import ConfigError

SPEC = {
    "name": "tinyrun", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "max_seq_len": 32, "max_steps": 30},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click", "conversion"],
    "variants": ["baseline", "kd", "full"],  # full = aux head + adapter + LoopFM codes
    "tuning": {"kd_weight": [0.5, 2.0], "temperature": [1.0], "aux_beta": [1.0],
               "adapter_hidden": [8]},
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
    assert kd["efficiency_vs_kd"] == pytest.approx(1.0)
    assert (df.ne_oracle < df.ne_teacher).all()  # the oracle is the best any model can do
    tuning = pd.read_csv(out / "tuning.csv")
    chosen = tuning[(tuning.variant == "kd") & tuning.chosen & (tuning.param == "kd_weight")]
    assert len(chosen) == 1 and chosen.value.iloc[0] in (0.5, 2.0)
    for name in ("spec.yaml", "environment.json", "log.txt", "command.txt", "report.md"):
        assert (out / name).is_file(), name
    assert (out / "curves" / "kd_seed0_lag0.csv").is_file()
    assert (out / "plots" / "ne_by_variant.png").is_file()


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
    loaded = load_spec(spec, ["data.seed=7", "data.drift=0.5", "seeds=[1,2,3]"])
    assert loaded.seeds == [1, 2, 3]
    assert loaded.data["seed"] == 7 and loaded.data["drift"] == 0.5
    assert apply_sets({"a": {"b": 1}}, parse_set(["a.c=[1, 2]"]), "x") == {
        "a": {"b": 1, "c": [1, 2]}}
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_set(["seeds"])
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--set", "variants=[kd, boosted]"]) == 2
    assert "unknown variant 'boosted'" in capsys.readouterr().err
    assert main(["run", str(spec), "--out", str(out), "--set", "studnet=mlp"]) == 2
    assert "unknown key 'studnet'" in capsys.readouterr().err
    assert not out.exists()

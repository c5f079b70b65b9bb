"""Bad input to ``gemkd student export`` and ``gemkd score``: one error line, exit code 2,
nothing written."""

from __future__ import annotations

import shutil

import pytest

from gemkd.experiments.cli import main
from tests.faults.conftest import cli_error


@pytest.fixture(scope="module")
def artifact(tiny_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("artifact") / "kd"
    assert main(["student", "export", str(tiny_run.out), "--variant", "kd", "--out",
                 str(out)]) == 0
    return out


def test_the_run_kept_each_variants_median_student(tiny_run):
    kept = sorted(p.name for p in (tiny_run.out / "students").rglob("*.pt"))
    assert kept == ["baseline__seed0.pt", "kd__seed0.pt"]  # one seed: it is the median


def test_export_of_a_variant_the_run_did_not_keep(tiny_run, tmp_path, capsys):
    line = cli_error(capsys, "student", "export", str(tiny_run.out), "--variant", "kd_repr",
                     "--out", str(tmp_path / "a"))
    assert "no kept student of variant 'kd_repr'; the run kept: baseline seed 0" in line
    assert not (tmp_path / "a").exists()


def test_export_over_an_artifact(tiny_run, artifact, capsys):
    line = cli_error(capsys, "student", "export", str(tiny_run.out), "--variant", "kd",
                     "--out", str(artifact))
    assert "already exists" in line


def test_score_bad_days_and_a_folder_that_is_no_artifact(tiny_run, artifact, tmp_path, capsys):
    line = cli_error(capsys, "score", str(artifact), "--data", str(tiny_run.data), "--days",
                     "5-6", "--out", str(tmp_path / "s.parquet"))
    assert "--days '5-6': expected A:B" in line
    line = cli_error(capsys, "score", str(tmp_path), "--data", str(tiny_run.data), "--days",
                     "5:6", "--out", str(tmp_path / "s.parquet"))
    assert "no artifact.json: not a student artifact" in line
    assert not (tmp_path / "s.parquet").exists()


def test_score_a_dataset_of_other_features(artifact, tiny_data, tmp_path, capsys):
    """Another world (other vocabularies): its ids would index other rows of the tables."""
    line = cli_error(capsys, "score", str(artifact), "--data", str(tiny_data), "--days", "5:6",
                     "--out", str(tmp_path / "s.parquet"))
    assert f"{tiny_data}: its categorical features" in line and "are not the artifact's" in line
    assert not (tmp_path / "s.parquet").exists()


def test_score_days_the_data_lacks(tiny_run, artifact, tmp_path, capsys):
    line = cli_error(capsys, "score", str(artifact), "--data", str(tiny_run.data), "--days",
                     "40:41", "--out", str(tmp_path / "s.parquet"))
    assert "40" in line
    assert not (tmp_path / "s.parquet").exists()


def test_score_a_window_reaching_past_the_data(tiny_run, artifact, tmp_path, capsys):
    """Days 5..7 of a dataset of days 0..5: one error naming the days it has, no clipped
    score of day 5 alone."""
    line = cli_error(capsys, "score", str(artifact), "--data", str(tiny_run.data), "--days",
                     "5:8", "--out", str(tmp_path / "s.parquet"))
    assert line == (f"error: {tiny_run.data}: days [5, 8) reach past the data; it has days "
                    "[0, 6)"), line
    assert not (tmp_path / "s.parquet").exists()


def test_export_states_its_evaluation_window(tiny_run, tmp_path, capsys):
    capsys.readouterr()
    assert main(["student", "export", str(tiny_run.out), "--variant", "kd", "--out",
                 str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "on days [5, 6)) to " in out, out
    assert "id vocabularies: none; the dataset " in out  # synthetic: its ids are codes
    assert "a synthetic dataset has no raw ids" in out, out


def test_a_changed_program_is_refused(artifact, tiny_run, tmp_path, capsys):
    copy = tmp_path / "art"
    shutil.copytree(artifact, copy)
    (copy / "program.pt2").write_bytes(b"not a program")
    line = cli_error(capsys, "score", str(copy), "--data", str(tiny_run.data), "--days", "5:6",
                     "--out", str(tmp_path / "s.parquet"))
    assert "program.pt2: sha256 does not match artifact.json" in line

"""TeacherFitDir, the owner of a teacher fit's run directory: its paths, its files read back as
written, and the rule that no other module spells one of its file names."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.transfer.teacher_fit_dir import TeacherFitDir

ROOT = Path(__file__).resolve().parents[2]
OWNER = "transfer/teacher_fit_dir.py"
#: the sources that must reach a teacher fit's files through the owner
SOURCES = ("transfer", "teachers", "students", "adapters", "experiments", "gemkd", "benchmarks",
           "studies")
#: a string holding one of these names a teacher fit's file (``.ckpt``: every checkpoint)
NAMES = (TeacherFitDir.CONFIG, TeacherFitDir.SUMMARY, TeacherFitDir.METRICS, "hparams.yaml",
         ".ckpt")


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (words about the files, not names in use)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def literals_outside_owner(root: Path, folders: tuple[str, ...] = SOURCES,
                           owner: str = OWNER) -> list[str]:
    """``path:line: 'text'`` for every string literal (f-string parts included, docstrings
    and comments not) in ``folders`` that names a teacher fit's file, or that joins the
    checkpoints folder into a path (``x / "checkpoints"``), outside ``owner``."""
    found: list[tuple[str, int, str]] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == owner or "__pycache__" in path.parts:
                continue
            tree = ast.parse(path.read_text(), rel)
            skip = _docstrings(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and id(node) not in skip and any(n in node.value for n in NAMES)):
                    found.append((rel, node.lineno, node.value))
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                    for side in (node.left, node.right):
                        if isinstance(side, ast.Constant) and \
                                side.value == TeacherFitDir.CHECKPOINTS:
                            found.append((rel, side.lineno, side.value))
    return [f"{rel}:{line}: {text!r}" for rel, line, text in sorted(found)]


def test_no_teacher_fit_file_name_outside_its_owner():
    found = literals_outside_owner(ROOT)
    assert not found, ("a teacher fit's file named outside TeacherFitDir (use its paths or "
                       "constants):\n" + "\n".join(found))


def test_the_check_finds_names_and_leaves_words_alone(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "owner.py").write_text('LAST = "last.ckpt"\n')
    (tmp_path / "pkg" / "user.py").write_text(
        '"""Reads ``val_metrics.json``."""\n'
        "# and checkpoints/last.ckpt\n"
        "def f(run, day):\n"
        '    """Docstrings name files freely: config.yaml."""\n'
        '    a = run / "checkpoints" / "x"\n'
        '    b = f"day={day}.ckpt"\n'
        '    c = {"checkpoints": 1}\n'
        '    return run / "metrics.csv", a, b, c\n')
    assert literals_outside_owner(tmp_path, ("pkg",), "pkg/owner.py") == [
        "pkg/user.py:5: 'checkpoints'", "pkg/user.py:6: '.ckpt'",
        "pkg/user.py:8: 'metrics.csv'"]


def test_the_metrics_log_is_the_one_lightning_writes():
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    assert TeacherFitDir.METRICS == ExperimentWriter.NAME_METRICS_FILE


def test_paths_of_a_fit(tmp_path):
    run = TeacherFitDir(tmp_path / "fit")
    assert run.last == tmp_path / "fit" / "checkpoints" / "last.ckpt"
    assert run.best == tmp_path / "fit" / "checkpoints" / "best.ckpt"
    assert run.day(12) == tmp_path / "fit" / "checkpoints" / "day=12.ckpt"
    assert TeacherFitDir.of_checkpoint(run.day(3)).root == run.root
    assert TeacherFitDir.checkpoint_day(run.day(12)) == 12
    assert TeacherFitDir.checkpoint_day(run.last) is None
    assert TeacherFitDir.checkpoint_day("x/day=1.ckpt.tmp") is None
    assert run.resume_path() is None and run.best_or_last() == run.last and run.days() == {}
    run.checkpoints.mkdir(parents=True)
    for name in ("day=10.ckpt", "day=2.ckpt", "last.ckpt", ".day=3.ckpt.tmp"):
        (run.checkpoints / name).write_bytes(b"x")
    assert list(run.days()) == [2, 10] and run.resume_path() == run.last
    assert run.best_or_last() == run.last and not run.is_best(run.last)
    run.best.write_bytes(b"x")
    assert run.best_or_last() == run.best and run.is_best(run.best)
    run.drop_last()
    assert not run.last.exists() and run.resume_path() is None


def test_files_read_back_as_written(tmp_path):
    run = TeacherFitDir(tmp_path / "fit")
    assert not run.has_config() and not run.has_summary() and run.read_metrics() is None
    with pytest.raises(OSError):
        run.read_summary()
    config = {"name": "gem", "train_days": [0, 8], "model": {"d": 8}}
    summary = {"epochs": 2, "best_epoch": 1, "val": {"ne/click/all": 0.9}}
    run.write_config(config)
    run.write_summary(summary)
    # the bytes fit_teacher has always written: key order kept, JSON indented by 2
    assert run.config_file.read_text() == yaml.safe_dump(config, sort_keys=False)
    assert run.summary_file.read_text() == json.dumps(summary, indent=2)
    assert run.read_config() == config and run.read_summary() == summary
    assert sorted(p.name for p in run.root.iterdir()) == ["config.yaml", "val_metrics.json"]
    pd.DataFrame({"epoch": [0], "val/loss": [0.5]}).to_csv(run.metrics_file, index=False)
    assert run.read_metrics()["val/loss"].tolist() == [0.5]

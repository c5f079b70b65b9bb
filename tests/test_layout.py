"""The source tree's naming rules (DESIGN §1): a module's file name says what it does and appears
once across the shipped packages and the benchmarks, so a traceback, a grep or an editor tab
names one file; tests/ mirrors the package tree; and the class paths the shipped configs name
still resolve after a rename."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from gemkd.students.student_registry import resolve_student_class
from gemkd.teachers.teacher_registry import resolve_teacher_class

ROOT = Path(__file__).resolve().parents[1]
#: the folders whose module file names must not repeat (tests/ mirrors them, so it may)
FOLDERS = ("transfer", "teachers", "students", "adapters", "experiments", "benchmarks")
#: one per package by design
PER_PACKAGE = {"__init__.py", "__main__.py"}


def repeated_module_names(root: Path, folders: tuple[str, ...] = FOLDERS
                          ) -> dict[str, list[str]]:
    """File name → the paths holding it, for every ``*.py`` name found more than once."""
    where: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name not in PER_PACKAGE and "__pycache__" not in path.parts:
                where[path.name].append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_module_file_names_are_unique():
    repeats = repeated_module_names(ROOT)
    assert not repeats, "module file names repeat (rename one, DESIGN §1): " + "; ".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(repeats.items()))


def test_the_check_finds_a_repeat(tmp_path):
    for rel in ("transfer/data/reader.py", "transfer/store/reader.py", "students/mlp.py",
                "students/__init__.py", "teachers/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert repeated_module_names(tmp_path, ("transfer", "students", "teachers")) == {
        "reader.py": ["transfer/data/reader.py", "transfer/store/reader.py"]}


#: the package folders tests/ mirrors: tests/<folder>/... holds the tests of <folder>/...
MIRRORED = ("transfer", "teachers", "students", "adapters", "experiments", "gemkd")
#: the test folders that mirror no package folder, by design
UNMIRRORED = {
    "faults": "fault tests: a user's bad input, kills and full disks, across the packages",
    "benchmarks": "the benchmarks' own tests (benchmarks/ is no package)",
    "studies": "the studies' own tests (studies/ is no package)",
}
#: the files at the top of tests/: the docs, packaging and whole-tree tests, and the shared
#: fixtures
TOP_FILES = {"__init__.py", "conftest.py", "test_api_docs.py", "test_docs.py",
             "test_import_from_parent.py", "test_layout.py", "test_no_issue_numbers.py",
             "test_packaging.py", "test_shuffle_order.py"}


def unmirrored_test_folders(root: Path) -> list[str]:
    """The folders under ``root/tests`` holding Python files whose path names no package folder
    (``tests/transfer/data`` mirrors ``transfer/data``), outside :data:`UNMIRRORED`; and the
    files at the top of tests/ outside :data:`TOP_FILES`."""
    tests = root / "tests"
    wrong = sorted(f.relative_to(root).as_posix() for f in tests.glob("*.py")
                   if f.name not in TOP_FILES)
    folders = {f.parent.relative_to(tests) for f in tests.rglob("*.py")
               if "__pycache__" not in f.parts} - {Path(".")}
    for rel in sorted(folders):
        if rel.parts[0] in UNMIRRORED:
            continue
        if rel.parts[0] not in MIRRORED or not (root / rel).is_dir():
            wrong.append(f"tests/{rel.as_posix()}")
    return wrong


def test_tests_mirror_the_package_tree():
    wrong = unmirrored_test_folders(ROOT)
    assert not wrong, ("tests/ mirrors the packages (DESIGN §1): move each test to the folder of "
                       "the module it tests, tests/<package>/<folder>: " + ", ".join(wrong))


def test_the_mirror_check_finds_a_stray_folder_and_file(tmp_path):
    for rel in ("transfer/data/schema.py", "tests/transfer/data/test_schema.py",
                "tests/data/test_reader.py", "tests/faults/test_kill.py", "tests/test_docs.py",
                "tests/test_loose.py", "tests/transfer/nowhere/test_x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert unmirrored_test_folders(tmp_path) == [
        "tests/test_loose.py", "tests/data", "tests/transfer/nowhere"]


def _shipped_class_paths() -> list[tuple[str, str, str]]:
    """(config, kind, class_path) for every class_path in experiments/**/*.yaml: a teacher
    config's top-level one, a spec's ``student`` (and its ``hierarchical`` teacher's)."""
    found = []
    for config in sorted((ROOT / "experiments").rglob("*.yaml")):
        values = yaml.safe_load(config.read_text()) or {}
        name = config.relative_to(ROOT).as_posix()
        if "class_path" in values:
            found.append((name, "teacher", values["class_path"]))
        student = values.get("student")
        if isinstance(student, dict) and "class_path" in student:
            found.append((name, "student", student["class_path"]))
        elif isinstance(student, str):
            found.append((name, "student", student))
    return found


def test_shipped_configs_name_teachers_and_students():
    kinds = {kind for _, kind, _ in _shipped_class_paths()}
    assert kinds == {"teacher", "student"}


@pytest.mark.parametrize(("config", "kind", "class_path"), _shipped_class_paths(),
                         ids=lambda v: str(v))
def test_shipped_class_paths_resolve(config, kind, class_path):
    resolve = resolve_teacher_class if kind == "teacher" else resolve_student_class
    assert isinstance(resolve(class_path), type), config

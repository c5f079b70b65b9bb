"""The wheel installs everything under the one name ``gemkd`` (DESIGN §1): no generic top-level
package (``transfer``, ``adapters``, ...) that other projects own on the package index, and every
package folder and shipped config of the repository inside it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("transfer", "teachers", "students", "adapters", "experiments")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> tuple[zipfile.ZipFile, str]:
    """The wheel and what its build printed (pip -v passes setuptools' warnings through)."""
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                          "--no-build-isolation", "-v", "-w", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=out)
    assert res.returncode == 0, res.stderr[-3000:]
    (path,) = out.glob("gemkd-*.whl")
    return zipfile.ZipFile(path), res.stdout + res.stderr


@pytest.fixture(scope="module")
def wheel(build) -> zipfile.ZipFile:
    return build[0]


def test_builds_without_setuptools_warnings(build):
    """Every folder Python can import (config folders included) is declared in pyproject's
    packages: setuptools then has nothing to warn about on an install."""
    log = build[1]
    assert "would be ignored" not in log, log[log.find("would be ignored") - 400:][:1200]
    assert "SetuptoolsDeprecationWarning" not in log


def test_one_top_level_name(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"gemkd"}
    top_level = [n for n in wheel.namelist() if n.endswith("top_level.txt")]
    for name in top_level:  # newer setuptools leave the file out
        assert wheel.read(name).decode().split() == ["gemkd"]


def test_every_package_and_config_is_inside(wheel):
    names = set(wheel.namelist())
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            assert f"gemkd/{rel}" in names, f"{rel} is not in the wheel (pyproject packages)"
    for config in (ROOT / "experiments").rglob("*.yaml"):
        rel = config.relative_to(ROOT).as_posix()
        assert f"gemkd/{rel}" in names, rel
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gemkd = gemkd.experiments.cli:main" in wheel.read(entry).decode()

"""Trap (b) of the first real log: ``import gemkd`` run from the folder that holds a clone named
``gemkd`` found the clone itself (a folder without ``__init__.py``, so a namespace package)
before the editable install, and ``gemkd.run_intervals`` was an AttributeError. The install must
put a regular package on the path, which wins over a namespace portion wherever it is."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

CODE = ("import gemkd, sys; gemkd.run_intervals; gemkd.transfer; import gemkd.transfer.metrics; "
        "print(gemkd.__file__)")


def test_import_gemkd_beside_a_clone_named_gemkd(tmp_path):
    (tmp_path / "gemkd").symlink_to(ROOT, target_is_directory=True)
    res = subprocess.run([sys.executable, "-c", CODE], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("__init__.py"), res.stdout


def test_import_gemkd_in_a_repl_started_beside_the_clone(tmp_path):
    """The same from the interactive interpreter (``''`` first on sys.path, as with -c)."""
    (tmp_path / "gemkd").symlink_to(ROOT, target_is_directory=True)
    res = subprocess.run([sys.executable, "-i", "-q"], input=CODE + "\n", cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert "Error" not in res.stderr, res.stderr
    assert "__init__.py" in res.stdout, res.stdout

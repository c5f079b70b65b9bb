"""Cache keys of ``gemkd run`` cover gemkd's code: an edit of a step's modules reruns the step,
an edit elsewhere does not (issue: a rerun after a code change reused a stale teacher)."""

from __future__ import annotations

from pathlib import Path

from experiments.run import cache
from experiments.run.cache import STEP_CODE, cached_step, code_hash


def test_code_hash_follows_the_files_of_the_step(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "other.py").write_text("y = 1\n")
    first = code_hash(("pkg",), tmp_path)
    (tmp_path / "other.py").write_text("y = 2\n")
    code_hash.cache_clear()
    assert code_hash(("pkg",), tmp_path) == first  # not the step's code
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    code_hash.cache_clear()
    assert code_hash(("pkg",), tmp_path) != first
    (tmp_path / "pkg" / "b.py").write_text("")
    code_hash.cache_clear()
    assert len({first, code_hash(("pkg",), tmp_path)}) == 2


def test_every_step_names_real_code():
    root = Path(cache.ROOT)
    for step, paths in STEP_CODE.items():
        for rel in paths:
            assert (root / rel).exists(), (step, rel)


def test_a_code_change_reruns_the_step(tmp_path, monkeypatch):
    runs: list[Path] = []
    logs: list[str] = []
    first = cached_step(tmp_path, "teacher", {"lr": 1}, runs.append, logs.append)
    again = cached_step(tmp_path, "teacher", {"lr": 1}, runs.append, logs.append)
    assert first == again and len(runs) == 1 and logs[-1].startswith("[cached]")
    monkeypatch.setattr(cache, "code_hash", lambda paths, root=cache.ROOT: "edited")
    edited = cached_step(tmp_path, "teacher", {"lr": 1}, runs.append, logs.append)
    assert edited != first and len(runs) == 2 and logs[-1].startswith("[run]")

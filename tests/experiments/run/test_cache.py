"""Cache keys of ``gemkd run`` cover gemkd's code: an edit of a step's modules reruns the step,
an edit elsewhere does not (issue: a rerun after a code change reused a stale teacher)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemkd.experiments.run import cache
from gemkd.experiments.run.cache import STEP_CODE, cached_step, code_hash, step_sources
from gemkd.experiments.run.progress import PlainLog, step_log


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
    for step in STEP_CODE:
        paths = step_sources(step)
        assert len(paths) == len(STEP_CODE[step])
        for rel in paths:
            assert (root / rel).exists(), (step, rel)
    assert "experiments/run/domain_fm_step.py" in step_sources("domain_fm")


def test_a_missing_module_or_path_fails_loudly(tmp_path, monkeypatch):
    """A module that moved must not silently drop out of a step's key."""
    monkeypatch.setitem(STEP_CODE, "teacher", (*STEP_CODE["teacher"], "gemkd.experiments.gone"))
    with pytest.raises(RuntimeError, match="'gemkd.experiments.gone', which cannot be imported"):
        step_sources("teacher")
    with pytest.raises(RuntimeError, match="cannot be imported"):
        cached_step(tmp_path, "teacher", {"lr": 1}, lambda step: None, lambda msg: None)
    monkeypatch.setitem(STEP_CODE, "teacher", ("nowhere_at_all.module",))
    with pytest.raises(RuntimeError, match="'nowhere_at_all.module'"):
        step_sources("teacher")
    with pytest.raises(FileNotFoundError, match="no such source file"):
        code_hash(("transfer/gone.py",))


def test_a_code_change_reruns_the_step(tmp_path, monkeypatch):
    runs: list[Path] = []
    logs: list[str] = []
    first = cached_step(tmp_path, "teacher", {"lr": 1}, runs.append, logs.append)
    again = cached_step(tmp_path, "teacher", {"lr": 1}, runs.append, logs.append)
    assert first == again and len(runs) == 1 and logs[-1].startswith("[cached]")
    monkeypatch.setattr(cache, "code_hash", lambda paths, root=cache.ROOT: "edited")
    edited = cached_step(tmp_path, "teacher", {"lr": 1}, runs.append, logs.append)
    assert edited != first and len(runs) == 2 and logs[-1].startswith("[run]")


def test_a_step_log_hears_every_step_done_a_plain_function_only_lines(tmp_path):
    class Counting(PlainLog):
        def __init__(self) -> None:
            super().__init__(lambda msg: None)
            self.done: list[str] = []

        def step_done(self, name: str) -> None:
            self.done.append(name)

    log, lines = Counting(), []
    cached_step(tmp_path, "teacher", {"lr": 1}, lambda step: None, log)
    cached_step(tmp_path, "teacher", {"lr": 1}, lambda step: None, log)  # cached: counted too
    assert log.done == ["teacher", "teacher"]
    assert isinstance(step_log(lines.append), PlainLog) and step_log(log) is log


def test_a_tree_of_links_hashes_as_the_files_it_links(tmp_path):
    """An editable install's tree of links and the source folder are the same code: a worker
    that imports gemkd from a checkout's folders must key a step as the command's process does
    (through the installed links), or the steps it prepared are not found."""
    from gemkd.experiments.run.cache import source_hash

    real = tmp_path / "transfer" / "data"
    real.mkdir(parents=True)
    (real / "a.py").write_text("x = 1\n")
    (real / "b.py").write_text("y = 2\n")
    links = tmp_path / "build" / "gemkd" / "transfer" / "data"
    links.mkdir(parents=True)
    for name in ("a.py", "b.py"):
        (links / name).symlink_to(real / name)
    before = source_hash(("transfer/data",), tmp_path)
    assert source_hash(("build/gemkd/transfer/data",), tmp_path) == before
    (real / "b.py").write_text("y = 3\n")  # an edit still changes the key, through the links too
    assert source_hash(("build/gemkd/transfer/data",), tmp_path) != before

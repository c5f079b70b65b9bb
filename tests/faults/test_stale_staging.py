"""What a killed export leaves (a hidden ``.STORE.tmp-*`` staging directory) is removed by the
next export to that path or by ``gemkd clean``; a staging directory a live export is still
writing (its lock held) is never touched."""

from __future__ import annotations

from pathlib import Path

from gemkd.experiments.cli import main
from tests.faults.conftest import assert_same_store, export_argv
from tests.faults.forked import fork_gemkd


def hidden(store: Path) -> list[str]:
    return sorted(p.name for p in store.parent.iterdir() if p.name.startswith(f".{store.name}."))


def staging_dirs(store: Path) -> list[Path]:
    return [p for p in store.parent.glob(f".{store.name}.tmp-*") if p.is_dir()]


def test_next_export_sweeps_a_killed_exports_staging(tiny_run, tmp_path):
    store = tmp_path / "store"
    child = fork_gemkd(export_argv(tiny_run, store), tmp_path / "child", pause="export.closed")
    child.wait_paused()
    child.kill()
    (left,) = staging_dirs(store)
    assert any(left.glob("part-*.parquet"))  # every shard complete, no manifest
    assert main(export_argv(tiny_run, store)) == 0
    assert_same_store(store, tiny_run.store)
    assert hidden(store) == []  # neither the staging directory nor its lock file is left


def test_clean_spares_a_live_export_and_sweeps_it_once_dead(tiny_run, tmp_path, capsys):
    store = tmp_path / "store"
    child = fork_gemkd(export_argv(tiny_run, store), tmp_path / "child",
                       pause="export.predicting")
    try:
        child.wait_paused()  # alive, holding its staging lock, part-way through writing
        (live,) = staging_dirs(store)
        (live / "probe").touch()  # (its first rows are still buffered in memory)
        stale = tmp_path / ".store.tmp-0123456789ab"  # what an older, killed export left
        (stale / "sub").mkdir(parents=True)
        (stale / "part-r000-00000.parquet").write_bytes(b"half")
        capsys.readouterr()
        assert main(["clean", str(store)]) == 0
        out = capsys.readouterr().out
        assert f"removed {stale}" in out and "1 stale staging directory removed" in out, out
        assert staging_dirs(store) == [live] and (live / "probe").exists()
        # an export to the same path meanwhile sweeps nothing of the live one either
        other = tmp_path / "other"
        assert main(export_argv(tiny_run, other)) == 0 and staging_dirs(store) == [live]
    finally:
        child.kill()
    assert main(["clean", str(tmp_path)]) == 0  # the directory form: everything under it
    assert staging_dirs(store) == [] and hidden(store) == []

"""Student runs side by side (DESIGN §6, §8): local worker processes and a Ray instance give the
serial path's results bit for bit, a finished run is never repeated, and a worker that dies
loses only its own run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.run_dir import read_ledger
from tests.faults.conftest import SPEC, results

# the fault tests' tiny spec with two seeds and a tuned knob: tuning candidates and final runs
FANOUT = {**SPEC, "name": "fanout", "seeds": [0, 1], "variants": ["baseline", "kd", "kd_aux"],
          "tuning": {**SPEC["tuning"], "knobs": {**SPEC["tuning"].get("knobs", {}),
                                                 "kd_weight": [0.5, 2.0], "aux_beta": [1.0]}}}


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fanout") / "spec.yaml"
    path.write_text(yaml.safe_dump(FANOUT))
    return path


def gemkd_run(spec: Path, out: Path, *extra: str) -> int:
    n = torch.get_num_threads()
    try:
        return main(["run", str(spec), "--out", str(out), "--threads", "1", *extra])
    finally:
        torch.set_num_threads(n)


#: what depends on the machine and the process, not on the run
WALL_CLOCK = ("train_seconds", "eval_seconds", "run_seconds", "examples_per_second", "max_rss_mb")


def ledger(out: Path) -> dict[str, dict]:
    """``runs.jsonl`` by key (each line's check verified and dropped: it covers the wall
    clock), without the wall-clock fields."""
    return {key: {k: v for k, v in r.items() if k not in WALL_CLOCK}
            for key, r in read_ledger(out / "runs.jsonl").items()}


@pytest.fixture(scope="module")
def serial(spec_path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serial") / "out"
    assert gemkd_run(spec_path, out, "--workers", "1") == 0
    return out


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_local_workers_give_the_serial_results(spec_path, serial, tmp_path):
    out = tmp_path / "out"
    assert gemkd_run(spec_path, out, "--workers", "2") == 0
    pd.testing.assert_frame_equal(results(out), results(serial), check_exact=True)
    assert ledger(out) == ledger(serial)  # every run's metrics, tuning candidates included
    # 6 final runs; each final seed's own search: 2 candidates of kd and of kd_aux
    assert len(ledger(out)) == 3 * 2 + 2 * (2 + 2)
    for name in ("tuning.csv",):
        pd.testing.assert_frame_equal(pd.read_csv(out / name), pd.read_csv(serial / name))
    clusters = sorted(p.relative_to(out) for p in out.glob("clusters/**/*.npz"))
    assert clusters == sorted(p.relative_to(serial) for p in serial.glob("clusters/**/*.npz"))
    for rel in clusters:
        assert (out / rel).read_bytes() == (serial / rel).read_bytes(), rel


def test_a_rerun_with_workers_repeats_nothing(spec_path, serial, tmp_path, capsys):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(serial, out)
    lines = (out / "runs.jsonl").read_text().splitlines()
    kept = len(lines) - 3
    (out / "runs.jsonl").write_text("\n".join(lines[:kept]) + "\n")  # killed: 3 final runs to go
    capsys.readouterr()
    assert gemkd_run(spec_path, out, "--workers", "2") == 0
    keys = [json.loads(line)["key"] for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == len(lines)  # the kept ones, the other 3 once each
    assert keys[:kept] == [json.loads(line)["key"] for line in lines[:kept]]
    assert all(k.startswith("final|") for k in keys[kept:])
    # the rerun packs the 3 runs left otherwise than the serial run did (kd seed 1 alone, not
    # beside seed 0): a member's numbers are its run alone's, bit for bit
    pd.testing.assert_frame_equal(results(out), results(serial), check_exact=True)


DIES = '''
import os

from gemkd.transfer.methods import KD


class DiesOnce(KD):
    """KD whose first run, anywhere, kills its process (a worker lost to the OOM killer)."""

    def setup(self, ctx):
        marker = os.environ["GEMKD_TEST_MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(9)
        super().setup(ctx)
'''


def test_a_dead_worker_loses_only_its_run(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "dying_method.py").write_text(DIES)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'pkg'}{os.pathsep}"
                                     f"{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setenv("GEMKD_TEST_MARKER", str(tmp_path / "died"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "seeds": [0, 1], "variants": {
        "baseline": [], "kd": ["kd"], "dies": ["dying_method.DiesOnce"]}}))
    out = tmp_path / "out"
    assert gemkd_run(spec, out, "--workers", "2") == 0
    assert (tmp_path / "died").exists()  # a worker did die
    df = pd.read_csv(out / "results.csv")
    assert sorted(set(df.variant)) == ["baseline", "dies", "kd"]
    keys = [json.loads(line)["key"] for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 6


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_ray_gives_the_serial_results(spec_path, serial, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'gemkd[ray]')")
    from gemkd.experiments.run.executors import kept_handlers

    try:
        with kept_handlers():  # ray.init's SIGTERM handler must not outlive the test
            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                     log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - any failure to start is a reason to skip
        pytest.skip(f"a local Ray instance could not start: {type(e).__name__}: {e}")
    try:
        out = tmp_path / "out"
        assert gemkd_run(spec_path, out, "--executor", "ray") == 0
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(results(out), results(serial), check_exact=True)
    assert ledger(out) == ledger(serial)

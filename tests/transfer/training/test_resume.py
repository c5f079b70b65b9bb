"""Kill a ``gemkd teacher fit`` with SIGKILL after its first checkpoint, resume it, and compare
with an uninterrupted run: same final global step, close validation NE."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "experiments/teacher/configs/tiny.yaml"
STEPS, EVERY = 100, 20


def _cmd(config: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gemkd.experiments.cli", "teacher", "fit", "--config",
            str(config), "--data", str(data), "--out", str(out), "--no-progress", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _fit(*cmd: str) -> dict:
    proc = subprocess.run(list(cmd), cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((Path(cmd[cmd.index("--out") + 1]) / "val_metrics.json").read_text())


@pytest.mark.slow  # ~1-2 min on 2 cores: make test-slow
def test_sigkill_then_resume_matches_uninterrupted(tiny_data, tmp_path):
    config = tmp_path / "tiny.yaml"
    values = yaml.safe_load(TINY.read_text())
    values.update(max_seq_len=32, max_steps=STEPS, checkpoint_every_n_steps=EVERY)
    config.write_text(yaml.safe_dump(values))

    full = _fit(*_cmd(config, tiny_data, tmp_path / "full"))
    assert full["global_step"] == STEPS and full["resumed_from"] is None

    out = tmp_path / "killed"
    last = out / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen(_cmd(config, tiny_data, out), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # let the first save finish
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert last.is_file() and not (out / "val_metrics.json").exists()
    config_written = yaml.safe_load((out / "config.yaml").read_text())
    assert config_written["max_steps"] == STEPS and config_written["strategy"] == "auto"

    resumed = _fit(*_cmd(config, tiny_data, out, "--resume"))
    assert resumed["resumed_from"] == str(last)
    assert resumed["global_step"] == full["global_step"] == STEPS
    for task in ("click", "conversion", "engage"):
        key = f"ne/{task}/all"
        assert abs(resumed["val"][key] - full["val"][key]) < 0.02, (task, resumed, full)
        # the resumed run replays the interrupted pass, skipping what it trained on: the same
        # batches as the uninterrupted run, so the same model up to float noise
        assert abs(resumed["val"][key] - full["val"][key]) < 1e-3, (task, resumed, full)

    # --resume without a checkpoint is a fresh run
    fresh = _fit(*_cmd(config, tiny_data, tmp_path / "fresh", "--resume"))
    assert fresh["resumed_from"] is None and fresh["global_step"] == STEPS
    assert abs(fresh["val"]["ne/click/all"] - full["val"]["ne/click/all"]) < 1e-6  # seeded

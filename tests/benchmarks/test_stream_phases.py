"""bench_teacher_stream's measuring parts: the phase timer accounts for a streamed fit's loop
(every step, each day's checkpoint, phases that add up to the loop), and candidates parse."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
import torch

from benchmarks.bench_teacher_stream import (
    BEFORE,
    ReferencePaths,
    callbacks_of,
    candidate,
    candidate_config,
    parse_candidate,
    recipes,
    shipped_config,
)
from benchmarks.stream_phases import PHASES, PhaseTimer
from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.spec.load import load_spec
from gemkd.experiments.teacher.teacher_config import load_teacher_config
from gemkd.experiments.teacher.teacher_fit import fit_teacher
from gemkd.transfer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a streaming fit: ~6 s on 2 busy cores
def test_phase_timer_accounts_for_a_streamed_fit(tiny_data, tmp_path):
    torch.set_num_threads(1)
    cfg = dataclasses.replace(load_teacher_config(ROOT / "experiments/teacher/configs/tiny.yaml"),
                              train_days=[0, 2], val_days=None, max_seq_len=16,
                              batch_size=256, stream=True)
    timer = PhaseTimer()
    summary = fit_teacher(cfg, tiny_data, tmp_path / "run", progress=False, callbacks=[timer])
    s = timer.seconds()
    assert s["steps"] == summary["global_step"] > 0
    assert all(s[p] >= 0 for p in PHASES)
    for phase in ("read", "forward", "backward", "clip+optimizer", "day_checkpoint"):
        assert s[phase] > 0, phase  # two day saves
    # the fit's last.ckpt is a hard link to its last day's checkpoint: not written a second time
    assert s["checkpoint"] == 0
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").samefile(
        tmp_path / "run" / "checkpoints" / "day=1.ckpt")
    assert sum(s[p] for p in PHASES) == pytest.approx(s["loop"], rel=1e-6)


def test_candidates_parse_and_apply():
    name, overrides = parse_candidate("big:batch_size=2048,lr=0.004,model.pyramid_shrink=4.0")
    assert name == "big" and overrides == {"batch_size": 2048, "lr": 0.004,
                                           "model.pyramid_shrink": 4.0}
    cfg = candidate_config(overrides)
    assert (cfg.batch_size, cfg.lr, cfg.model["pyramid_shrink"]) == (2048, 0.004, 4.0)
    assert cfg.max_seq_len == 256 and cfg.train_days == [0, 1] and cfg.val_days is None
    before = candidate_config(BEFORE)
    assert (before.batch_size, before.prefetch) == (512, 0)
    for bad in ("nocolon", ":lr=1", "x:lr"):
        with pytest.raises(ConfigError, match="--candidate"):
            parse_candidate(bad)


def test_after_is_the_benchmark_specs_streaming_teacher_and_before_the_old_code():
    spec = load_spec(ROOT / "experiments" / "benchmark.yaml")
    shipped = plan_run(spec).teachers[0]
    after = shipped_config()
    assert shipped.stream and after.stream
    assert dataclasses.replace(after, train_days=shipped.train_days) == shipped
    assert after.train_days == [0, 1] and after.val_days is None
    out = recipes(argparse.ArgumentParser(), ["lean:config=small_lean,reference_paths=true"])
    assert out["after"].config == after and not out["after"].reference_paths
    assert out["before"].reference_paths and out["before"].config == candidate_config(BEFORE)
    assert out["before"].config.model == load_teacher_config(
        ROOT / "experiments/teacher/configs/small.yaml").model
    lean = out["lean"]
    assert lean.reference_paths and lean.config.model["pyramid_shrink"] == 4.0
    assert [type(c) for c in callbacks_of(lean)] == [ReferencePaths]
    assert callbacks_of(out["after"]) == []
    plain = candidate({"lr": 0.001})
    assert plain.config.lr == 0.001 and plain.config.name == "gem-small"
    assert not plain.reference_paths
    with pytest.raises(SystemExit):
        recipes(argparse.ArgumentParser(), ["bad:config=no_such_teacher"])

"""A teacher fit's ``prefetch`` key: training batches read ahead in a thread change
nothing that is trained — the same batches in the same order, so the same daily weights — so a
cached teacher stays valid when it changes; and the key is validated."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from gemkd.experiments.teacher_checkpoint import model_weights
from gemkd.experiments.teacher_config import (
    TeacherTrainConfig,
    build_run,
    cache_key,
    load_teacher_config,
)
from gemkd.experiments.teacher_fit import fit_teacher
from gemkd.transfer.config import build_dataclass
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.training.day_checkpoints import day_checkpoints

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cfg() -> TeacherTrainConfig:
    torch.set_num_threads(1)
    c = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml")
    return dataclasses.replace(c, train_days=[0, 2], val_days=None, max_seq_len=16,
                               batch_size=256, stream=True)


@pytest.mark.slow  # two streaming fits: ~10 s on 2 busy cores
def test_prefetched_stream_trains_the_same_daily_weights(tiny_data, tmp_path, cfg):
    fit_teacher(dataclasses.replace(cfg, prefetch=0), tiny_data, tmp_path / "plain",
                progress=False)
    fit_teacher(dataclasses.replace(cfg, prefetch=3), tiny_data, tmp_path / "ahead",
                progress=False)
    plain = day_checkpoints(tmp_path / "plain" / "checkpoints")
    ahead = day_checkpoints(tmp_path / "ahead" / "checkpoints")
    assert sorted(plain) == sorted(ahead) == [0, 1]
    for day in plain:
        a, b = model_weights(plain[day]), model_weights(ahead[day])
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), day


def test_the_config_prefetch_reaches_the_training_loader(tiny_data, cfg):
    dm, _ = build_run(dataclasses.replace(cfg, prefetch=5), tiny_data)
    assert dm.prefetch == 5 and dm.train_dataloader().prefetch == 5


@pytest.mark.parametrize("key", ["prefetch", "num_workers"])
def test_negative_prefetch_is_a_clear_error(key):
    with pytest.raises(ConfigError, match=r"'prefetch' and 'num_workers' must be >= 0.*-1"):
        build_dataclass(TeacherTrainConfig, {key: -1}, source="x.yaml")


def test_the_shipped_small_recipe_prefetches():
    assert load_teacher_config(ROOT / "experiments/teachers/small.yaml").prefetch > 0


def test_prefetch_leaves_a_cached_teacher_valid():
    cfg = load_teacher_config(ROOT / "experiments/teachers/small.yaml")
    key = cache_key(cfg)
    assert "prefetch" not in key and key["lr"] == cfg.lr
    assert cache_key(dataclasses.replace(cfg, prefetch=0)) == key
    assert cache_key(dataclasses.replace(cfg, lr=cfg.lr * 2)) != key

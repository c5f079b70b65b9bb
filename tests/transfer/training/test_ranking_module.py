"""RankingModule + build_trainer in one process on the tiny world with the tiny GEM config."""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from torch import nn

from gemkd.experiments.cli import main
from gemkd.experiments.teacher.teacher_config import build_run, load_teacher_config
from gemkd.transfer.store import PREDICTION_KEYS
from gemkd.transfer.training import build_trainer, fit

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "experiments/teacher/configs/tiny.yaml"
FAST = {"max_seq_len": 32}  # short histories keep a tiny GEM step at ~50 ms on CPU


class Losses(pl.Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.values.append(float(outputs["loss"]))


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    # from random output biases, so that the loss has to fall (the recipe starts them calibrated)
    cfg = load_teacher_config(TINY, {**FAST, "max_steps": 40, "init_output_bias": False})
    dm, module = build_run(cfg, tiny_data)
    losses = Losses()
    trainer = build_trainer(tmp_path_factory.mktemp("run"), max_steps=40, progress_bar=False,
                            log_every_n_steps=5, callbacks=[losses], enable_model_summary=False)
    fit(module, dm, trainer)
    return cfg, dm, module, trainer, losses.values


def test_loss_falls_and_val_metrics(trained):
    cfg, dm, module, trainer, losses = trained
    assert trainer.global_step == 40 and len(losses) == 40
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-8:]) / 8 < sum(losses[:8]) / 8 - 0.05, losses
    (result,) = trainer.validate(module, datamodule=dm, verbose=False)
    metrics = module.last_metrics["val"]
    for task in module.tasks:
        for dom in [*module.domains, "all"]:
            for m in ("ne", "auc", "calibration"):
                assert f"{m}/{task}/{dom}" in metrics
                assert f"val/{m}/{task}/{dom}" in result
    assert 0.5 < metrics["ne/click/all"] < 1.2
    assert metrics["n/click/all"] == 8000  # two validation days
    assert abs(result["val/ne/click/all"] - metrics["ne/click/all"]) < 1e-6
    csv = Path(trainer.default_root_dir) / "metrics.csv"
    assert "train/loss" in csv.read_text().splitlines()[0]
    assert (Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt").is_file()


def test_parameter_groups(trained):
    cfg, _, module, trainer, _ = trained
    (opt,) = trainer.optimizers
    assert isinstance(opt, torch.optim.AdamW)
    groups = {g["name"]: g for g in opt.param_groups}
    assert set(groups) == {"embedding", "dense"}
    emb = {id(m.weight) for m in module.model.modules() if isinstance(m, nn.Embedding)}
    assert emb and {id(p) for p in groups["embedding"]["params"]} == emb
    assert groups["embedding"]["lr"] == cfg.embedding_lr > cfg.lr == groups["dense"]["lr"]
    assert groups["embedding"]["weight_decay"] == 0.0
    assert groups["dense"]["weight_decay"] == cfg.weight_decay
    dense = {id(p) for p in groups["dense"]["params"]}
    assert not dense & emb
    assert dense | emb == {id(p) for p in module.model.parameters()}


def test_predict_step(trained):
    _, dm, module, trainer, _ = trained
    batch = next(iter(dm.reader("val")))
    module.eval()
    with torch.no_grad():
        rows = module.predict_step(batch, 0)
    assert tuple(rows) == PREDICTION_KEYS
    b = len(batch)
    assert rows["logits"].shape == (b, len(module.tasks))
    assert rows["emb"].shape == (b, module.model.representation_dims()["trunk"])
    assert torch.equal(rows["example_id"], batch.example_id)
    rows = trainer.predict(module, dataloaders=dm.val_dataloader())
    assert sum(len(r["example_id"]) for r in rows) == 8000
    assert all(tuple(r) == PREDICTION_KEYS for r in rows)
    module.repr_layer = "nope"
    with pytest.raises(KeyError, match="nope"):
        module.predict_step(batch, 0)
    module.repr_layer = "trunk"


def test_loss_mask_and_task_weights(trained):
    _, _, module, _, _ = trained
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 3, generator=g)
    labels = (torch.rand(16, 3, generator=g) < 0.3).float()
    mask = torch.rand(16, 3, generator=g) < 0.7
    labels_nan = torch.where(mask, labels, torch.nan)
    total, per_task = module.loss(logits, labels_nan, mask)
    for t in range(3):
        ref = nn.functional.binary_cross_entropy_with_logits(
            logits[mask[:, t], t], labels[mask[:, t], t])
        assert torch.allclose(per_task[t], ref, atol=1e-6)
    assert torch.isfinite(total)
    module.task_weight.copy_(torch.tensor([1.0, 0.0, 2.0]))
    try:
        total, per_task = module.loss(logits, labels)
        assert torch.allclose(total, per_task[0] + 2 * per_task[2])
    finally:
        module.task_weight.fill_(1.0)


def test_unknown_task_weight_rejected(tiny_data):
    cfg = load_teacher_config(TINY, {**FAST, "task_weights": {"clik": 1.0}})
    with pytest.raises(Exception, match="clik"):
        build_run(cfg, tiny_data)


def test_cli_config_errors(tiny_data, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load(TINY.read_text()), "learning_rate": 1.0}))
    assert main(["teacher", "fit", "--config", str(bad), "--data", str(tiny_data),
                 "--out", str(tmp_path / "run")]) == 2
    assert "unknown key 'learning_rate'" in capsys.readouterr().err
    bad.write_text(yaml.safe_dump({**yaml.safe_load(TINY.read_text()), "train_days": [20, 30]}))
    assert main(["teacher", "fit", "--config", str(bad), "--data", str(tiny_data),
                 "--out", str(tmp_path / "run")]) == 2
    assert "train_days" in capsys.readouterr().err
    bad.write_text(yaml.safe_dump({**yaml.safe_load(TINY.read_text()), "lr": "fast"}))
    assert main(["teacher", "fit", "--config", str(bad), "--data", str(tiny_data),
                 "--out", str(tmp_path / "run")]) == 2
    assert "'lr'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["tiny", "small", "base"])
def test_shipped_configs_validate(name):
    cfg = load_teacher_config(ROOT / f"experiments/teacher/configs/{name}.yaml")
    assert cfg.val_days is not None and cfg.train_days[1] <= cfg.val_days[0]

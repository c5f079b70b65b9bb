"""A fit's run directory holds one copy of its latest state, not one per epoch: ``last.ckpt``
alone, with the optimizer while the fit can be resumed, weights only once it has finished."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from gemkd.experiments.teacher_checkpoint import model_weights
from gemkd.experiments.teacher_config import load_teacher_config
from gemkd.experiments.teacher_fit import fit_teacher
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.training.latest_checkpoint import FINAL, weights_only

ROOT = Path(__file__).resolve().parents[3]
STEPS, EVERY, CRASH = 12, 4, 6


class _Crash(pl.Callback):
    """Fails the fit before step ``CRASH`` (a kill), recording ``last.ckpt`` as it then is."""

    def __init__(self, last: Path) -> None:
        self.last = last
        self.seen: dict = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == CRASH:
            state = torch.load(self.last, map_location="cpu", weights_only=False)
            self.seen.update(step=state["global_step"], keys=set(state),
                             size=self.last.stat().st_size)
            raise RuntimeError("killed")


@pytest.fixture
def cfg():
    torch.set_num_threads(1)
    c = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml")
    return dataclasses.replace(c, train_days=[0, 2], val_days=[2, 3], max_seq_len=8,
                               max_steps=STEPS, checkpoint_every_n_steps=EVERY)


def test_one_checkpoint_resumable_mid_run_weights_only_when_finished(tiny_data, tmp_path, cfg):
    out = tmp_path / "run"
    last = out / "checkpoints" / "last.ckpt"
    crash = _Crash(last)
    with pytest.raises(RuntimeError, match="killed"):
        fit_teacher(cfg, tiny_data, out, progress=False, callbacks=[crash])
    # mid-run: the one checkpoint is the latest save, with what a resume needs
    assert crash.seen["step"] == EVERY and "optimizer_states" in crash.seen["keys"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["last.ckpt"]

    summary = fit_teacher(cfg, tiny_data, out, resume=True, progress=False)
    assert summary["resumed_from"] == str(last) and summary["global_step"] == STEPS
    # finished: still one file (no epoch=E-step=S.ckpt copy), now the weights only
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["last.ckpt"]
    final = torch.load(last, map_location="cpu", weights_only=False)
    assert final[FINAL] is True and final["global_step"] == STEPS
    assert not {"optimizer_states", "callbacks", "lr_schedulers"} & set(final)
    # AdamW's two moments per weight are gone: about a third of the resume checkpoint
    assert last.stat().st_size < 0.5 * crash.seen["size"]
    weights = model_weights(last)
    assert weights.keys() == {k[len("model."):] for k in final["state_dict"]}
    assert weights_only(last) == (last.stat().st_size,) * 2  # already final: left as it is

    # --resume of a finished fit: nothing to train, its summary
    again = fit_teacher(cfg, tiny_data, out, resume=True, progress=False)
    assert again == {**summary, "val": again["val"]} and again["global_step"] == STEPS
    with pytest.raises(ConfigError, match=r"has finished with max_steps: 12 \(this config: 20\)"
                                          r".*holds the weights only"):
        fit_teacher(dataclasses.replace(cfg, max_steps=20), tiny_data, out, resume=True,
                    progress=False)
    later = dataclasses.replace(cfg, train_days=[3, 4], val_days=None)
    with pytest.raises(ConfigError, match="a finished fit's checkpoint holds the weights only"):
        fit_teacher(later, tiny_data, tmp_path / "later", progress=False, continue_from=last)
    assert not (tmp_path / "later").exists()

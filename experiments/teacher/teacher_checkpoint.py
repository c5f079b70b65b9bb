"""Reading a gemkd teacher checkpoint (a Lightning file or a sharded directory): shared by the
export, the evaluation, parameter sharing and warm starts (``init_from``); a whole teacher is
rebuilt from one by :func:`gemkd.experiments.teacher.teacher_config.load_teacher`."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.teacher_fit_dir import TeacherFitDir


def _read_checkpoint(ckpt: Path) -> dict:
    if ckpt.is_dir():  # FSDP2 / distributed-checkpoint directory
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            flat = Path(tmp) / "consolidated.pt"
            dcp_to_torch_save(ckpt, flat)
            return torch.load(flat, map_location="cpu", weights_only=False)
    return torch.load(ckpt, map_location="cpu", weights_only=False)


def check_checkpoint(ckpt: str | Path, what: str = "--ckpt") -> Path:
    """``ckpt`` is a checkpoint file or a sharded (distributed) checkpoint directory; anything
    else is a ConfigError that says the checkpoint is missing, before any config is looked up."""
    ckpt = Path(ckpt)
    if not ckpt.exists():
        raise ConfigError(f"{what} {ckpt}: no such checkpoint")
    if ckpt.is_dir() and not (ckpt / ".metadata").is_file():
        inside = TeacherFitDir(ckpt).last
        hint = f" (did you mean {inside}?)" if inside.exists() else ""
        raise ConfigError(f"{what} {ckpt}: a directory, not a checkpoint: no {inside.name} file "
                          f"and no sharded checkpoint (.metadata) in it{hint}")
    return ckpt


def model_weights(ckpt: str | Path, what: str = "--ckpt") -> dict[str, torch.Tensor]:
    """The model's state dict from a RankingModule checkpoint (keys without ``model.``)."""
    ckpt = check_checkpoint(ckpt, what)
    try:
        raw = _read_checkpoint(ckpt)
    except Exception as e:  # torch raises many types for a damaged file
        raise ConfigError(f"{what} {ckpt}: unreadable checkpoint ({str(e).splitlines()[0]})"
                          ) from None
    state = raw.get("state_dict", raw.get("model", raw)) if isinstance(raw, dict) else None
    weights = {k[len("model."):]: v for k, v in (state or {}).items()
               if k.startswith("model.") and isinstance(v, torch.Tensor)}
    if not weights:
        raise ConfigError(f"{what} {ckpt}: no model weights (expected a gemkd teacher "
                          "checkpoint with 'model.*' entries)")
    return weights


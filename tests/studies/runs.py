"""A tiny finished ``gemkd run`` for the studies that read one (``--run RUN_DIR``)."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from gemkd.experiments.cli import main as gemkd


def spec_run(tmp_path_factory, name: str, spec: dict) -> Path:
    """Run ``spec`` on one torch thread into a fresh folder; its run directory."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp(name)
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert gemkd(["run", str(tmp / "spec.yaml"), "--out", str(tmp / "out")]) == 0
    return tmp / "out"

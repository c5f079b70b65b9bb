"""Steps cached by the hash of their config: a rerun (or a resumed crash) skips finished work.

A step's output lives in ``cache/<name>-<hash>``; it counts as done only when ``DONE`` exists,
written after the step returned, so a step killed half-way is redone (steps themselves write
atomically or resume from their own checkpoints).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def config_hash(config: Any) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()
                          ).hexdigest()[:12]


def cached_step(cache: Path, name: str, config: Any, run: Callable[[Path], None],
                log: Callable[[str], None] = print) -> Path:
    """Run ``run(step_dir)`` unless a finished step with the same config exists."""
    step = cache / f"{name}-{config_hash(config)}"
    done = step / "DONE"
    if done.is_file():
        log(f"[cached] {name} ({step.name})")
        _count(log, name)
        return step
    step.mkdir(parents=True, exist_ok=True)
    (step / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    log(f"[run] {name} ({step.name})")
    run(step)
    done.write_text("ok\n")
    _count(log, name)
    return step


def _count(log: Callable[[str], None], name: str) -> None:
    """Tell a progress log (``experiments.run.progress.Progress``) that a step is done."""
    step_done = getattr(log, "step_done", None)
    if step_done is not None:
        step_done(name)

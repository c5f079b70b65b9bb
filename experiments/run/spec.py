"""The experiment spec: one YAML (``experiments/quickstart.yaml``) plus ``--set key=value``.

Mappings nest one level (``data:``, ``teacher:``, ``student:``, ``tuning:``, ``repr:``); every
key is checked, so a typo is an error naming the key instead of a silently ignored knob.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from transfer.config import build_dataclass, load_yaml
from transfer.errors import ConfigError

VARIANTS = ["baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr", "hierarchical", "full"]
EXPERIMENTS = Path(__file__).resolve().parents[1]


@dataclass
class RunSpec:
    name: str = "experiment"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    data: dict[str, Any] = field(default_factory=lambda: {"source": "synthetic",
                                                          "preset": "small"})
    teacher: dict[str, Any] = field(default_factory=lambda: {"config": "small"})
    teacher_days: int = 9
    student_days: list[int] = field(default_factory=lambda: [9, 12])
    eval_days: list[int] = field(default_factory=lambda: [12, 14])
    teacher_lag_days: int | list[int] = 0
    student: dict[str, Any] = field(default_factory=lambda: {"class_path": "mlp"})
    student_tasks: list[str] = field(default_factory=lambda: ["click", "conversion"])
    student_domain: str | None = None
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    batch_size: int = 256
    lr: float = 0.01
    kd_loss: str = "bce"
    tuning: dict[str, Any] = field(default_factory=lambda: {
        "kd_weight": [0.5, 1.0, 2.0, 4.0, 8.0], "temperature": [1.0], "aux_beta": [0.5, 1.0],
        "adapter_hidden": [16]})
    repr: dict[str, Any] = field(default_factory=lambda: {
        "layer": "trunk", "code_dim": 8, "bits": 8, "max_events": 50, "epochs": 10})
    hierarchical: dict[str, Any] = field(default_factory=lambda: {"config": "domain_fm"})
    accelerator: str = "cpu"  # the students' Lightning accelerator: small models, CPU default
    ema_decay: float | None = None  # evaluate an EMA of the student's weights (None: last step)

    def __post_init__(self) -> None:
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown variant {unknown[0]!r}; variants are {', '.join(VARIANTS)}")
        if self.accelerator not in ("cpu", "gpu", "cuda", "auto"):
            raise ValueError(f"'accelerator' must be cpu, gpu or auto, got {self.accelerator!r}")
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ValueError(f"'ema_decay' must be in (0, 1) or null, got {self.ema_decay}")
        if not self.seeds:
            raise ValueError("'seeds' must list at least one seed")
        for key in ("student_days", "eval_days"):
            days = getattr(self, key)
            if len(days) != 2 or days[0] >= days[1]:
                raise ValueError(f"{key!r} must be a half-open range [first, end), got {days}")
        if self.student_days[0] < self.teacher_days or self.eval_days[0] < self.student_days[1]:
            raise ValueError("days must be ordered: teacher [0, teacher_days) <= student_days "
                             "<= eval_days")
        for lag in self.lags:
            if not 0 <= lag < self.teacher_days:
                raise ValueError(f"teacher_lag_days {lag} must be in [0, teacher_days)")

    @property
    def lags(self) -> list[int]:
        lags = self.teacher_lag_days
        return list(lags) if isinstance(lags, list) else [lags]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["data.seed=7", "seeds=[1,2,3]"]`` → ``{"data.seed": 7, "seeds": [1, 2, 3]}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: value is not valid YAML") from None
    return out


def apply_sets(values: dict[str, Any], sets: dict[str, Any], source: str) -> dict[str, Any]:
    values = copy.deepcopy(values)
    for key, value in sets.items():
        parts = key.split(".")
        if len(parts) > 2:
            raise ConfigError(f"--set {key}: at most one level of nesting (e.g. data.seed)")
        if len(parts) == 2:
            outer = values.setdefault(parts[0], {})
            if not isinstance(outer, dict):
                raise ConfigError(f"--set {key}: {parts[0]!r} in {source} is not a mapping")
            outer[parts[1]] = value
        else:
            values[key] = value
    return values


def load_spec(path: str | Path | None, sets: list[str] | None = None) -> RunSpec:
    path = Path(path) if path else EXPERIMENTS / "quickstart.yaml"
    values = apply_sets(load_yaml(path), parse_set(sets or []), str(path))
    return build_dataclass(RunSpec, values, source=str(path))

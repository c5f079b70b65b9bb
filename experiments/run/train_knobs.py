"""The student's own training knobs — learning rate and EMA decay — searched for every variant
(DESIGN §6 "Fair comparison"). A method's knobs were tuned while the labels-only baseline kept
the spec's lr: a tuned method against an untuned baseline. With ``tuning.draws: per_seed`` the
lr is a knob of every variant (the baseline included, so every variant gets ``tuning.trials``
trials), and so is ``ema_decay`` when the spec sets one; each range's default is the spec's
value, so a search's first trial is today's untuned run. ``tuning.draws: shared`` (the earlier
versions' runs) searches them only where ``tuning:`` names them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods.space import LogUniform, Range, Uniform, resolve

#: The knobs that set the student's training, not a method: spec key = knob name.
TRAIN_KNOBS = ("lr", "ema_decay")
#: The lr is searched over [lr / LR_SPAN, lr · LR_SPAN], in log (Adam's useful lr spans decades).
LR_SPAN = 4.0
#: The EMA decay's range (time constants of 10 to 200 steps), widened to hold the spec's value.
EMA_RANGE = (0.9, 0.995)


def train_space(spec: RunSpec) -> dict[str, Range]:
    """Knob → range of the student's training knobs the search explores for every variant,
    checked: a bound or listed value outside what the trainer takes (lr > 0, ema_decay in
    (0, 1)) or ``tuning.ema_decay`` without a spec ``ema_decay`` is a ``ConfigError``."""
    knobs = spec.tuning.knobs
    every = spec.tuning.draws != "shared"
    space: dict[str, Range] = {}
    if every or "lr" in knobs:
        declared: Range = LogUniform(spec.lr / LR_SPAN, spec.lr * LR_SPAN, default=spec.lr)
        space["lr"] = _resolved("lr", declared, knobs.get("lr"), lambda v: v > 0, "> 0")
    if "ema_decay" in knobs and spec.ema_decay is None:
        raise ConfigError("spec tuning: knob 'ema_decay' searches the EMA decay, and the spec "
                          "evaluates the last step (ema_decay: null): set ema_decay (e.g. 0.98, "
                          "the search's first trial) or leave tuning.ema_decay out")
    if spec.ema_decay is not None and (every or "ema_decay" in knobs):
        d = spec.ema_decay
        declared = Uniform(min(EMA_RANGE[0], d), max(EMA_RANGE[1], d), default=d)
        space["ema_decay"] = _resolved("ema_decay", declared, knobs.get("ema_decay"),
                                       lambda v: 0 < v < 1, "in (0, 1)")
    return space


def _resolved(knob: str, declared: Range, override: Any, ok, rule: str) -> Range:
    try:
        rng = resolve(declared, override)
    except ValueError as e:
        raise ConfigError(f"spec tuning: knob {knob!r} (the student's, default "
                          f"{declared.describe()}): {e}") from None
    bad = [v for v in rng.probe_values() if isinstance(v, bool) or
           not isinstance(v, int | float) or not ok(v)]
    if bad:
        raise ConfigError(f"spec tuning: knob {knob!r} {rng.describe()}: {bad[0]!r} is not a "
                          f"valid {knob} (must be {rule})")
    return rng


def with_train_knobs(spec: RunSpec, params: Mapping[str, Any]) -> RunSpec:
    """``spec`` as one run trains it: its ``lr`` and ``ema_decay`` replaced by the run's knobs
    where ``params`` holds them (the spec itself when it holds none)."""
    changes = {k: params[k] for k in TRAIN_KNOBS if k in params}
    return dataclasses.replace(spec, **changes) if changes else spec

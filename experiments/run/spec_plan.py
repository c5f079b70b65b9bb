"""What a run does that its spec alone does not say, worked out once before any work starts.

The spec is pure data: it never reads a file. Some of a run's values depend on the teacher
config the spec names (a file): how many validation days each lag's window holds out follows
from the config's ``max_epochs``, and the days each lag's teacher trains on follow from that.
:func:`gemkd.experiments.run.preflight.plan_run` reads the configs once and returns a
:class:`RunPlan`; the steps take its values instead of asking the spec to read them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gemkd.experiments.spec.run_spec import RunSpec


@dataclass(frozen=True)
class RunPlan:
    """A run's values derived from its spec and the teacher configs (DESIGN §6.1).

    ``val_days`` the validation days each lag's window holds out; ``seen`` lag → the half-open
    days that lag's teacher trains on; ``teachers`` / ``domain_fms`` lag → the teacher config
    (a ``TeacherTrainConfig``) its fit step trains (empty: an imported store / no variant
    learns from a domain FM)."""

    val_days: int
    seen: dict[int, tuple[int, int]]
    teachers: dict[int, Any]
    domain_fms: dict[int, Any]

    @property
    def lags(self) -> list[int]:
        return list(self.seen)


def held_out_days(spec: RunSpec, teacher_epochs: int | None) -> int:
    """The validation days each lag's window holds out: ``teacher_val_days``, or where it is
    null 1 when the teacher config (with the spec's overrides) trains more than one epoch
    (``teacher_epochs``; None: not read, as a streaming or imported teacher needs none) and
    every lag's window has a day to spare, else 0."""
    if spec.teacher_val_days is not None:
        return spec.teacher_val_days
    if not needs_epochs(spec) or teacher_epochs is None or teacher_epochs <= 1:
        return 0
    windows = [spec.teacher_window(lag) for lag in spec.lags]
    return 1 if all(end - first >= 2 for first, end in windows) else 0


def needs_epochs(spec: RunSpec) -> bool:
    """Whether :func:`held_out_days` depends on the teacher config's ``max_epochs``."""
    return (spec.teacher_val_days is None and spec.teacher_protocol != "streaming"
            and spec.teacher.store is None)


def teacher_seen(spec: RunSpec, lag: int, val_days: int) -> tuple[int, int]:
    """The half-open days the lag-``lag`` teacher has trained on: its window less the
    ``val_days`` held out, or under streaming every day from ``teacher_stream_start`` to
    ``teacher_days - lag`` (the checkpoint of the day before)."""
    first, end = spec.teacher_window(lag)
    if spec.teacher_protocol == "streaming":
        return spec.teacher_stream_start, end
    return first, end - val_days

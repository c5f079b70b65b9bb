"""The state of one ``gemkd run`` as one object: the spec, the run directory, its log, tracker,
executor and ledger, and — per world and teacher lag — what the lag's students learn from. The
pipeline's functions take it instead of a dozen arguments, and build every student run's
self-contained request from it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gemkd.experiments.run.executors import Executor
from gemkd.experiments.run.jobs import InputPaths, StudentRun
from gemkd.experiments.run.spec_plan import RunPlan
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.data.schema import day_range


@dataclass
class RunContext:
    """``plan`` the spec's derived values; ``out`` the run directory (every file in it written
    through :attr:`run`); ``log`` the run's :class:`~gemkd.experiments.run.progress.Progress`;
    ``done`` the ledger (``runs.jsonl``: key → record)."""

    spec: RunSpec
    #: what the spec's teacher configs decide (:func:`gemkd.experiments.run.preflight.plan_run`)
    plan: RunPlan
    out: Path
    log: Any
    executor: Executor
    tracker: Any = None
    done: dict[str, dict] = field(default_factory=dict)
    #: wall seconds per phase of the run (:meth:`phase`), in the order first entered
    phases: dict[str, float] = field(default_factory=dict)
    #: this context's student runs perturbed (``robustness.perturb``): the repeat's context
    perturb: str | None = None
    #: the repeat under perturbed numerics (:mod:`gemkd.experiments.run.perturbed`), or None
    perturbed: Any = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the wall time of the block towards ``name`` (phases.json, log.txt); entering
        the tuning or the final runs says so in the log with their student runs' progress
        (piped output has no bar: a line per phase tells where a long run is)."""
        if name != "steps" and hasattr(self.log, "status"):
            self.log(f"-- {name}: {self.log.status()}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    @cached_property
    def run(self) -> RunDir:
        """The run directory's files."""
        return RunDir(self.out)

    @property
    def cache(self) -> Path:
        return self.run.cache

    def record(self, key: str, result: dict[str, Any]) -> None:
        """A finished student run: into the ledger file and :attr:`done`."""
        self.done[key] = self.run.append_ledger(key, result)

    @property
    def tasks(self) -> list[str]:
        return list(self.spec.student_tasks)

    def execute(self, runs: list[StudentRun],
                done: Callable[[StudentRun, dict[str, Any]], None]) -> None:
        """Hand ``runs`` to the executor; ``done`` hears of each, in this process."""
        if runs:
            self.executor.run(runs, done)


@dataclass
class LagCell:
    """One (world, teacher lag): its data, the teacher's window end, the students' inputs and
    the tag that ties a ledger line to exactly those inputs."""

    world: int
    lag: int
    data: Path
    train_end: int
    inputs: InputPaths
    tag: str
    base_rates: dict[str, float]
    world_key: str = ""  # "" for a run of one world, "w<seed>|" when it replicates worlds

    def clusters(self, run: RunDir, name: str) -> Path:
        """Where the per-user loss sums of ``name``'s evaluation go (the report reads them)."""
        return run.clusters_path(self.world, self.lag, name)

    def request(self, ctx: RunContext, phase: str, variant: str, params: dict[str, Any],
                seed: int, train_days: tuple[int, int], eval_days: tuple[int, int],
                key: str) -> StudentRun:
        """A self-contained student run of this cell (final runs keep their curve and
        per-user evaluation sums)."""
        final = phase == "final"
        curve = ctx.run.curve_path(variant, seed, self.lag,
                                   self.world if self.world_key else None)
        return StudentRun(
            key=key, phase=phase, spec=ctx.spec, variant=variant, params=dict(params),
            seed=seed, lag=self.lag, world=self.world, train_days=day_range(train_days),
            eval_days=day_range(eval_days), trained_until_day=self.train_end - 1,
            data=str(self.data), stores={k: str(v) for k, v in self.inputs.stores.items()},
            base_rates=dict(self.base_rates),
            codes=None if self.inputs.codes is None else str(self.inputs.codes),
            ckpt=None if self.inputs.ckpt is None else str(self.inputs.ckpt),
            pairs=None if self.inputs.pairs is None else str(self.inputs.pairs),
            curve=str(curve) if final else None,
            clusters=str(self.clusters(ctx.run, f"{variant}__seed{seed}")) if final else None,
            student=str(ctx.run.student_path(self.world, self.lag, variant, seed))
            if final and ctx.spec.keep_students != "none" else None,
            tracker=ctx.tracker, perturb=ctx.perturb)

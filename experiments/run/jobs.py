"""One student run as a self-contained request: everything a worker process (or a Ray task on
another machine) needs to train and evaluate it, by value or by path, and nothing that ties it
to the process that planned it. A run's result depends only on its request (each is seeded by
its own seed), so a sweep gives the same results whichever worker ran which run, in any order.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.data.schema import day_range
from gemkd.transfer.io import fs

if TYPE_CHECKING:  # student.py imports Lightning: only when a run is opened
    from gemkd.experiments.run.student import Inputs


@dataclass(frozen=True)
class InputPaths:
    """Where a lag's upstream steps put what its students learn from: the teacher sources'
    stores (``gem``, ``domain_fm``), the LoopFM code store, GEM's checkpoint (None for an
    imported store) and the SOLARIS pair store. Paths, not opened objects: a worker process
    opens them itself."""

    stores: dict[str, fs.Where]
    codes: Path | None = None
    ckpt: Path | None = None
    pairs: Path | None = None

    def open(self, max_events: int) -> Inputs:
        """The opened inputs (in this process)."""
        from gemkd.experiments.run.student import Inputs
        from gemkd.experiments.teacher.teacher_checkpoint import model_weights
        from gemkd.transfer.repr_features import CodeStore
        from gemkd.transfer.solaris import PairStore

        # verified once here; each student scope opens its as-of index (Inputs.codes_for)
        codes = None if self.codes is None else CodeStore(self.codes)
        ckpt = self.ckpt
        weights = None if ckpt is None else (lambda: model_weights(ckpt))
        pairs = None if self.pairs is None else PairStore(self.pairs)
        return Inputs(dict(self.stores), codes, weights, pairs, max_events=max_events)


@dataclass(frozen=True)
class StudentRun:
    """``key`` is the run's line in ``runs.jsonl``; ``phase`` ``tune`` (a validation run of a
    search trial) or ``final``; ``clusters``: where to write the per-user loss sums of the
    evaluation (final runs), ``curve``: the training-loss CSV, ``student``: where to keep the
    evaluated student (spec ``keep_students``; :mod:`gemkd.experiments.run.kept_students`);
    ``perturb``: the run's numerics perturbed (``ulp``:
    :func:`gemkd.transfer.training.ulp_perturb.perturb_weights`), the repeat of ``robustness:``."""

    key: str
    phase: str
    spec: RunSpec
    variant: str
    params: dict[str, Any]
    seed: int
    lag: int
    world: int
    train_days: tuple[int, int]
    eval_days: tuple[int, int]
    trained_until_day: int
    data: str
    stores: dict[str, str]
    base_rates: dict[str, float]
    codes: str | None = None
    ckpt: str | None = None
    pairs: str | None = None
    curve: str | None = None
    clusters: str | None = None
    student: str | None = None
    tracker: Any = None  # a gemkd.transfer.training.loggers.Tracker, or None
    perturb: str | None = None


#: Inputs opened by this process, by what they were opened from: a worker pays for opening a
#: store's join index or a scope's as-of index of the codes once, not once per run.
_OPEN: dict[tuple, Any] = {}


def _inputs(run: StudentRun):
    paths = InputPaths({k: fs.as_where(v) for k, v in run.stores.items()},
                       Path(run.codes) if run.codes else None,
                       Path(run.ckpt) if run.ckpt else None,
                       Path(run.pairs) if run.pairs else None)
    key = (tuple(sorted(run.stores.items())), run.codes, run.ckpt, run.spec.repr.max_events,
           run.pairs)
    if key not in _OPEN:
        _OPEN.clear()  # one lag's inputs at a time: the next lag's replace them
        _OPEN[key] = paths.open(run.spec.repr.max_events)
    return _OPEN[key]


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports kilobytes, macOS
    bytes): every ledger record carries it (``max_rss_mb``), so a sweep whose worker ran out of
    memory says over which runs it grew."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def _keeper(run: StudentRun) -> Any:
    """What keeps ``run``'s evaluated student (None: the run keeps none)."""
    if run.student is None:
        return None
    from gemkd.experiments.run.kept_students import save_student

    return lambda module, metrics: save_student(run, module, metrics)


def execute(run: StudentRun) -> dict[str, Any]:
    """Train and evaluate ``run``; returns ``runs.jsonl``'s record of it (metrics, timing —
    ``train_seconds``, ``eval_seconds`` and the whole ``run_seconds`` — teacher coverage, the
    process's peak memory ``max_rss_mb``)."""
    from gemkd.experiments.run.student import StudentJob, train_student
    from gemkd.experiments.run.tracking import student_logger

    t0 = time.perf_counter()
    variant = run.spec.variant(run.variant)
    job = StudentJob(variant, dict(run.params), run.seed, day_range(run.train_days),
                     day_range(run.eval_days), run.trained_until_day, run.perturb)
    logger = student_logger(run.tracker, run.phase, run.variant, run.seed, run.lag,
                            dict(run.params))
    res = train_student(run.spec, job, fs.as_where(run.data), _inputs(run), dict(run.base_rates),
                        curve_path=Path(run.curve) if run.curve else None, logger=logger,
                        clusters_path=Path(run.clusters) if run.clusters else None,
                        on_trained=_keeper(run))
    # the whole run as its worker saw it: training + evaluation + every fixed cost
    return {**res, "run_seconds": time.perf_counter() - t0, "max_rss_mb": peak_rss_mb()}

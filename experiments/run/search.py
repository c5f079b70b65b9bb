"""The equal-budget search of one variant's knobs (DESIGN §6 "Fair comparison"), by Optuna.

One :class:`Search` is one Optuna study: one (variant, lag, world) and draw (a final seed's, or
one for every seed), ``trials`` trials (the same number for every variant with knobs), sampler
``tpe``, ``random`` or ``grid``. A runner drives it without knowing Optuna::

    search = Search(space, spec.tuning.sampler, spec.tuning.trials, spec.seeds[0],
                    run_dir / "tuning", study_name(variant.name, lag, world))
    while (params := search.next()) is not None:
        search.tell(params, mean validation NE of tuning.seeds students built with params)
    chosen, edges = search.best(), search.at_edge()

(:func:`run_search` is that loop.) Several studies interleave freely — ask each for its next
params, train their students side by side, tell each its score when it is in — as long as each
study has at most one trial out: ``next()`` returns the same params until they are told.
:class:`SearchTuner` is that in rounds, for a runner that trains every variant's candidate of
a round as one batch; a space with nothing to choose (:func:`single_point`: the labels-only
baseline) needs no validation run.

Why it is built so:

- **Resumable.** The study lives in ``storage_dir/<name>.journal`` (Optuna's ``JournalStorage``,
  one file per study): a killed run's completed trials are not repeated, and the trial the kill
  interrupted is handed out again by ``next()``. Optuna writes an ask as several records (the
  trial, then each param) and a duplicate's reuse before its score: a kill between them leaves
  a trial without all its params, or a duplicate never told. Both are finished at the next
  ask (:meth:`Search._repair`): the missing params are sampled again by the sampler that drew
  the others, on the same history (so they are the ones the whole ask would have written).
- **No lock outlives its process.** An append to a journal is guarded by an OS lock on the
  journal file itself (:class:`_KernelLock`, ``flock``), which the kernel drops when its holder
  exits or is killed: a rerun after a SIGKILL at any moment never waits. (Optuna's default, a
  symlink ``<name>.journal.lock``, stays behind when its holder is killed inside an append, and
  its stale-lock recovery never fires where the link's target is a relative path: the rerun
  waited forever. Such a link, left by an earlier version, is removed at start, with a note.)
- **Deterministic.** The sampler is built afresh for every ask, seeded by (``seed``,
  ``seed_key``, trial number), and reads the history from storage; asks and tells are strictly
  sequential per study. So trial k's params depend on trials 0..k−1 only — not on a kill and
  resume, nor on other studies running beside it. (The grid sampler is seeded per study: its
  order is one shuffle of the grid.) The runner's ``seed_key`` is the study's (variant, lag,
  world), not its file name, which also carries a hash of the inputs and of gemkd's source: an
  edit that leaves the students' numbers as they were then leaves every choice as it was, and a
  changed input meets the same random draws (its effect is not mixed with new search luck).
- **The defaults first.** Trial 0 (``tpe``, ``random``) is every knob at its declared default
  (``Range.center``): a tuned variant is never worse on validation than its documented start.
- **Duplicates are free.** Params identical to a finished trial's (a one-point space, a small
  categorical space, an exhausted grid) are told that trial's score at once, without training.
- **TPE starts guided early**: ``n_startup_trials = min(10, max(3, trials // 4))`` random trials
  (Optuna's default, 10, would leave a budget of 8 entirely random).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.storages.journal._file import LOCK_FILE_SUFFIX, BaseJournalFileLock
from optuna.trial import TrialState

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods.space import (
    Categorical,
    IntRange,
    LogUniform,
    Range,
    Uniform,
    space_signature,
)
from gemkd.transfer.options import Sampler

_PRIMITIVE = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: its ``value`` (validation NE; NaN for a failed one) and, for a
    duplicate that was not trained, the trial whose score it reused."""

    number: int
    params: dict[str, Any]
    value: float
    reused_from: int | None = None


def study_name(variant: str, lag: int, world: int | None = None, draw: int | None = None
               ) -> str:
    """The study of one (variant, teacher lag, world, draw); ``world`` None: the spec's one
    world; ``draw`` the final seed whose search it is (None: one search for every seed)."""
    return (f"{variant}-lag{lag}" + ("" if world is None else f"-world{world}")
            + ("" if draw is None else f"-seed{draw}"))


def grid_values(space: Mapping[str, Range]) -> dict[str, list[Any]]:
    """The grid of a ``grid`` search: every knob must be a list (:class:`Categorical`)."""
    bad = [k for k, r in space.items() if not isinstance(r, Categorical)]
    if bad:
        raise ConfigError(f"spec tuning: sampler grid needs a list of values for knob "
                          f"{bad[0]!r} (its range is {space[bad[0]].describe()}): give "
                          f"tuning: {{{bad[0]}: [v1, v2, ...]}}, or use sampler tpe or random")
    return {k: list(r.values) for k, r in space.items() if isinstance(r, Categorical)}


class _AskTellGrid(optuna.samplers.GridSampler):
    """``GridSampler`` without its ``study.stop()`` after a trial: that ends an ``optimize``
    loop, and ask-and-tell has none (Optuna raises there)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


class _Codec:
    """Knob values ↔ Optuna's: a choice that is not a plain scalar (a list, a mapping) is
    stored as its JSON text."""

    def __init__(self, space: Mapping[str, Range]) -> None:
        self.space = dict(space)
        self.choices = {k: [self._encode(v) for v in r.values] for k, r in self.space.items()
                        if isinstance(r, Categorical)}

    @staticmethod
    def _encode(value: Any) -> Any:
        return value if isinstance(value, _PRIMITIVE) else json.dumps(value, sort_keys=True)

    def distributions(self) -> dict[str, BaseDistribution]:
        out: dict[str, BaseDistribution] = {}
        for k, r in self.space.items():
            if isinstance(r, Categorical):
                out[k] = CategoricalDistribution(self.choices[k])
            elif isinstance(r, IntRange):
                out[k] = IntDistribution(int(r.low), int(r.high), log=r.log)
            else:
                assert isinstance(r, Uniform | LogUniform), f"{k}: unknown range {r!r}"
                out[k] = FloatDistribution(float(r.low), float(r.high), log=r.log)
        return out

    def encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (self._encode(v) if k in self.choices else v) for k, v in params.items()}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for k in self.space:
            v, r = params[k], self.space[k]
            # the choices' knobs are the Categorical ones
            out[k] = r.values[self.choices[k].index(v)] if isinstance(r, Categorical) else v
        return out


class Search:
    """One study (see the module docstring): ``space`` knob → range (e.g.
    ``gemkd.experiments.run.methods.search_space``), ``sampler`` tpe | random | grid, ``trials`` its
    budget, ``seed`` the spec's seed, ``storage_dir`` where the study is kept (the run's
    ``tuning/``), ``name`` the study (:func:`study_name`), ``note`` where a stale lock's removal
    is said (the run's log; None: stderr). Resuming a study with another space, sampler or seed
    is a ``ConfigError``; with another ``trials`` it stops at the new count."""

    def __init__(self, space: Mapping[str, Range], sampler: Sampler, trials: int, seed: int,
                 storage_dir: Path, name: str, seed_key: str | None = None,
                 note: Callable[[str], None] | None = None) -> None:
        if trials < 1:
            raise ConfigError(f"spec tuning: trials must be >= 1, got {trials}")
        self.space = dict(sorted(space.items()))
        self.sampler, self.n_trials, self.seed, self.name = sampler, int(trials), int(seed), name
        self.seed_key = name if seed_key is None else seed_key
        self._grid = grid_values(self.space) if sampler == "grid" else None
        self._grid_size = math.prod(len(v) for v in (self._grid or {}).values())
        self._codec = _Codec(self.space)
        self._dists = self._codec.distributions()
        # absolute: the journal is found wherever the process's working directory goes
        self.path = Path(storage_dir).absolute() / f"{_file_stem(name)}.journal"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_line(self.path)
        _drop_stale_symlink_lock(self.path, note)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # gemkd is quiet: no per-trial INFO
        storage = JournalStorage(JournalFileBackend(str(self.path), journal_lock(self.path)))
        self._study = optuna.create_study(storage=storage, study_name=name,
                                          direction="minimize", load_if_exists=True,
                                          sampler=self._make_sampler(0))
        self._check_identity()
        if sampler != "grid" and not self._study.get_trials(deepcopy=False):
            self._study.enqueue_trial(self._codec.encode({k: r.center()
                                                          for k, r in self.space.items()}))

    # ------------------------------------------------------------------ driving
    def next(self) -> dict[str, Any] | None:
        """The next params to score, or None when ``trials`` trials are finished. Until they
        are told, the same params again (a resumed run gets the trial a kill interrupted)."""
        batch = self.next_batch(1)
        return batch[0] if batch else None

    def next_batch(self, n: int) -> list[dict[str, Any]]:
        """Up to ``n`` params to score at once (empty when ``trials`` trials are finished):
        those handed out and not yet told (a resumed run gets them again), then new asks, each
        sampled with the others still out (TPE's constant liar). A new ask equal to a finished
        trial is told that trial's score at once; one equal to a trial still out waits for it
        and is told its score too (:meth:`tell`): a duplicate costs no training."""
        self._repair()
        while True:
            trials = self._study.get_trials(deepcopy=False)
            finished = [t for t in trials if t.state.is_finished()]
            out = [t for t in trials if t.state == TrialState.RUNNING]
            handed = [t for t in out if f"reused:{t.number}" not in self._study.user_attrs]
            if len(handed) >= n or len(finished) + len(out) >= self.n_trials or (
                    # an exhausted grid repeats finished points (free): none while any is out
                    self._grid is not None and handed
                    and sum(t.state != TrialState.WAITING for t in trials) >= self._grid_size):
                return [self._codec.decode(t.params) for t in handed]
            number, params = self._ask(trials, finished)
            twin = next((t for t in finished + handed
                         if self._codec.decode(t.params) == params), None)
            if twin is None:
                continue
            # a duplicate costs no training: it gets its twin's result (recorded on the study:
            # a trial's own attributes need its Trial object, which a resumed run has not)
            self._study.set_user_attr(f"reused:{number}", twin.number)
            if twin.state == TrialState.COMPLETE:
                self._study.tell(number, twin.value)
            elif twin.state.is_finished():
                self._study.tell(number, state=TrialState.FAIL)

    def _ask(self, trials: list, finished: list) -> tuple[int, dict[str, Any]]:
        """Ask the sampler, built for this trial, for the next params."""
        number = sum(t.state != TrialState.WAITING for t in trials)
        waiting = len(trials) > number
        if self._grid is not None and not waiting and number >= self._grid_size:
            # the grid is exhausted: repeat its points in order (free, as duplicates)
            self._study.enqueue_trial(finished[number % len(finished)].params)
        self._study.sampler = self._make_sampler(number)
        trial = self._study.ask(self._dists)
        return trial.number, self._codec.decode(trial.params)

    def tell(self, params: Mapping[str, Any], value: float) -> None:
        """Record ``value`` (lower is better) for the params ``next()`` handed out; a value
        that is not finite (a diverged student) marks the trial failed."""
        self._repair()
        reused = self._study.user_attrs
        running = [t for t in self._study.get_trials(deepcopy=False)
                   if t.state == TrialState.RUNNING]
        trial = next((t for t in running if f"reused:{t.number}" not in reused
                      and self._codec.decode(t.params) == dict(params)), None)
        if trial is None:
            raise ValueError(f"study {self.name}: tell({dict(params)}) does not answer "
                             "params next() or next_batch() handed out")
        value = float(value)
        # the trial, then the duplicates asked while it was out (they wait for its score)
        for t in [trial, *(d for d in running if reused.get(f"reused:{d.number}") ==
                            trial.number)]:
            if math.isfinite(value):
                self._study.tell(t.number, value)
            else:
                self._study.tell(t.number, state=TrialState.FAIL)

    # ------------------------------------------------------------------ results
    def history(self) -> list[TrialRecord]:
        """Every finished trial, in trial order."""
        out = []
        reused = self._study.user_attrs
        for t in self._study.get_trials(deepcopy=False):
            if not t.state.is_finished():
                continue
            value = t.value if t.state == TrialState.COMPLETE and t.value is not None else math.nan
            out.append(TrialRecord(t.number, self._codec.decode(t.params), float(value),
                                   reused.get(f"reused:{t.number}")))
        return out

    def trials(self) -> list[tuple[dict[str, Any], float]]:
        """``(params, value)`` of every finished trial, in trial order (NaN: failed)."""
        return [(r.params, r.value) for r in self.history()]

    @property
    def done(self) -> bool:
        return len(self.history()) >= self.n_trials

    def best_trial(self) -> TrialRecord:
        """The trial with the lowest value (the earliest of equals). ``LookupError`` if no
        trial has completed."""
        scored = [r for r in self.history() if math.isfinite(r.value)]
        if not scored:
            raise LookupError(f"study {self.name}: no trial has completed")
        return min(scored, key=lambda r: (r.value, r.number))

    def best(self) -> dict[str, Any]:
        """The chosen params: those of :meth:`best_trial`."""
        return self.best_trial().params

    def at_edge(self) -> dict[str, str]:
        """Knob → ``"low"``/``"high"`` for a chosen value within 5 % of a bound that is not
        natural, in the range's own scale (log for log ranges; the ends of a list of numbers):
        the range to widen."""
        best = self.best()
        return {k: side for k, r in self.space.items() if (side := r.edge(best[k])) is not None}

    # ------------------------------------------------------------------ internals
    def _repair(self) -> None:
        """Finish the writes a kill cut short: a trial asked without all its params gets the
        rest (:meth:`_complete`); a duplicate whose twin is finished gets the twin's score."""
        trials = self._study.get_trials(deepcopy=False)
        by_number = {t.number: t for t in trials}
        reused = self._study.user_attrs
        for t in trials:
            if t.state != TrialState.RUNNING:
                continue
            twin = by_number.get(reused.get(f"reused:{t.number}", -1))
            if twin is not None and twin.state == TrialState.COMPLETE:
                self._study.tell(t.number, twin.value)
            elif twin is not None and twin.state.is_finished():
                self._study.tell(t.number, state=TrialState.FAIL)
            elif twin is None and set(t.params) != set(self._dists):
                self._complete(t, trials)

    def _complete(self, torn: Any, trials: list) -> None:
        """Write the params ``torn`` lacks: an enqueued trial's from its fixed params, a
        sampled one's by asking its sampler (seeded for its number) again on a copy of the
        history it was asked on (the trials before it), with the grid's attributes."""
        fixed = torn.system_attrs.get("fixed_params")
        attrs: dict[str, Any] = {}
        if fixed is not None:
            values = dict(fixed)
        else:
            before = [t for t in trials if t.number < torn.number and
                      t.state != TrialState.WAITING]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                shadow = optuna.create_study(direction="minimize",
                                             sampler=self._make_sampler(len(before)))
                shadow.add_trials(before)
                again = shadow.ask(self._dists)
            values, attrs = again.params, shadow.trials[-1].system_attrs
        storage = self._study._storage
        for key, value in attrs.items():
            if key not in torn.system_attrs:
                storage.set_trial_system_attr(torn._trial_id, key, value)
        for name, dist in self._dists.items():
            if name not in torn.params:
                storage.set_trial_param(torn._trial_id, name, dist.to_internal_repr(values[name]),
                                        dist)

    def _trial_seed(self, number: int | None) -> int:
        key = f"{self.seed}|{self.seed_key}|{'study' if number is None else number}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")

    def _make_sampler(self, number: int) -> optuna.samplers.BaseSampler:
        if self._grid is not None:
            return _AskTellGrid({k: self._codec.choices[k] for k in self._grid},
                                seed=self._trial_seed(None))
        if self.sampler == "random":
            return optuna.samplers.RandomSampler(seed=self._trial_seed(number))
        # constant_liar: trials still out (next_batch) count at the worst score, so a batch's
        # asks spread out; with none out (one at a time) TPE samples as without it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=self._trial_seed(number),
                                              n_startup_trials=min(10, max(3, self.n_trials // 4)),
                                              constant_liar=True)

    def _check_identity(self) -> None:
        want = {"space": space_signature(self.space), "sampler": self.sampler,
                "seed": self.seed}
        have = self._study.user_attrs
        for key, value in want.items():
            if key not in have:
                self._study.set_user_attr(key, value)
            elif have[key] != value:
                raise ConfigError(f"tuning study {self.name!r} in {self.path} was started with "
                                  f"another {key} ({have[key]!r}, now {value!r}): remove "
                                  "that file to start its search over")


def run_search(search: Search, score: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """Drive ``search`` serially: ``score(params)`` (e.g. the mean validation NE over the
    tuning seeds) for each trial it asks for; return the chosen params."""
    while (params := search.next()) is not None:
        search.tell(params, score(params))
    return search.best()


def single_point(space: Mapping[str, Range]) -> dict[str, Any] | None:
    """The one point of a space with nothing to choose (no knobs, or one value each), else
    None: such a variant needs no validation run at all."""
    point = {k: r.values[0] for k, r in space.items()
             if isinstance(r, Categorical) and len(r.values) == 1}
    return point if len(point) == len(space) else None


class SearchTuner:
    """A :class:`Search` in rounds (the runner's ``Tuner``: ``ask`` → the next candidates, empty
    when done; ``tell``; ``best``; ``scored``): ``batch`` candidates a round (``tuning.batch``),
    one by default, since trial k's params then depend on trial k − 1's score. A space with
    one point (none: the labels-only baseline under
    ``tuning.draws: shared``) asks for nothing and is chosen as it is."""

    def __init__(self, search: Search, batch: int = 1) -> None:
        self.search, self.batch = search, batch
        self._fixed = single_point(search.space)

    def ask(self) -> list[dict[str, Any]]:
        if self._fixed is not None:
            return []
        return self.search.next_batch(self.batch)

    def tell(self, params: dict[str, Any], value: float) -> None:
        self.search.tell(params, value)

    def best(self) -> dict[str, Any]:
        return dict(self._fixed) if self._fixed is not None else self.search.best()

    def scored(self) -> list[tuple[dict[str, Any], float]]:
        return [] if self._fixed is not None else self.search.trials()


def _file_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._=-]+", "_", name)
    return stem if stem == name else f"{stem}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def _drop_torn_line(path: Path) -> None:
    """A process killed mid-append can leave a journal's last line without its newline; the
    next append would glue onto it and make the file unreadable. Cut it (it was never
    committed: Optuna writes a record in one append)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    with open(path, "r+b") as f:
        f.truncate(data.rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())


class _KernelLock(BaseJournalFileLock):
    """Optuna's journal lock as ``flock`` on the journal file itself: an OS lock, dropped by the
    kernel when the process holding it exits or is killed, so no lock outlives its holder and
    nothing is left beside the journal. Opened for writing (never written: Optuna appends
    through its own handle), as an exclusive lock emulated over NFS needs."""

    def __init__(self, path: Path) -> None:
        self._path = str(path)
        self._fd: int | None = None

    def acquire(self) -> bool:
        import fcntl

        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # the last descriptor of the open file: the lock goes with it


def journal_lock(path: Path) -> BaseJournalFileLock:
    """The lock of the journal at ``path``: :class:`_KernelLock` where ``flock`` exists (POSIX),
    else Optuna's symlink lock with an absolute target (its stale-lock recovery needs one)."""
    if sys.platform == "win32":
        return JournalFileSymlinkLock(str(Path(path).absolute()))
    return _KernelLock(path)


def _drop_stale_symlink_lock(path: Path, note: Callable[[str], None] | None) -> None:
    """Remove Optuna's symlink lock ``<journal>.lock`` where one was left: gemkd takes
    :class:`_KernelLock` instead, so such a link is a killed process's (an earlier version's),
    and its owner is gone (one run at a time holds the run directory)."""
    lock = Path(f"{path}{LOCK_FILE_SUFFIX}")
    if sys.platform == "win32" or not os.path.lexists(lock):
        return
    lock.unlink(missing_ok=True)
    message = f"removed a stale tuning lock left by a killed run: {lock}"
    if note is None:
        print(f"note: {message}", file=sys.stderr)
    else:
        note(message)

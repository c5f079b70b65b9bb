"""The fair-comparison rule (DESIGN §6): every variant picks its knobs on the validation day
(the last student day) by the same search — an Optuna study of ``tuning.trials`` trials over its
methods' declared ranges and the student's lr and EMA decay
(:mod:`gemkd.experiments.run.search`, :mod:`gemkd.experiments.run.train_knobs`) — each candidate
scored by the mean validation NE of the first task over ``tuning.seeds`` training seeds.

Each final seed has a search of its own (``tuning.draws: per_seed``): its own sampler seed, its
candidates scored on validation seeds that are no final seed (:func:`validation_seeds`), its
choice training that seed alone — so the search's luck differs between the seeds of a variant
and the seed level of every interval carries it. ``shared`` is one search for every seed, scored
on the first final seed: the runs of earlier versions, with their keys.

Tuning goes in rounds: each round asks every variant's tuner for its next candidates, trains
them all as one batch of student runs (side by side on the run's executor) and tells each tuner
its scores. A tuner's sequence of candidates depends only on its own scores, so the choices do
not depend on how many workers trained them or in which order.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gemkd.experiments.run.context import LagCell, RunContext
from gemkd.experiments.run.inputs import variant_tag
from gemkd.experiments.run.jobs import StudentRun
from gemkd.experiments.run.methods import search_space
from gemkd.experiments.run.search import Search, SearchTuner, single_point, study_name
from gemkd.experiments.run.tuning_rows import tuning_rows as rows_of_search
from gemkd.experiments.spec.run_spec import RunSpec, VariantSpec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods.space import Categorical

#: Draw s (``tuning.draws: per_seed``) scores its candidates on training seeds s + 1000,
#: s + 2000, ... (``tuning.seeds`` of them): never a final seed, never another draw's.
VALIDATION_OFFSET = 1000


def draws(spec: RunSpec) -> list[int | None]:
    """The searches of every (variant, lag, world): one per final seed, named by it
    (``per_seed``), or ``[None]``, one for every seed (``shared``)."""
    return list(spec.seeds) if spec.tuning.draws == "per_seed" else [None]


def make_tuner(ctx: RunContext, cell: LagCell, variant: VariantSpec, draw: int | None = None
               ) -> SearchTuner:
    """The variant's Optuna study for the cell and ``draw`` (:func:`draws`), kept under
    ``RUN_DIR/tuning`` (a killed run resumes it); the study's name carries the variant's input
    tag (:func:`variant_tag`), so a changed spec starts a new search instead of continuing
    another's, and a variant added to the spec leaves the others' studies as they were, while
    its samplers are seeded by (variant, lag, world, draw) alone: the tag also hashes gemkd's
    source, and a search reseeded by every edit would move a run's choices (and its results)
    with code that computes the same numbers (:func:`search_seed`)."""
    spec = ctx.spec
    key = study_name(variant.name, cell.lag, cell.world, draw)
    return SearchTuner(Search(search_space(spec, variant), spec.tuning.sampler,
                              spec.tuning.trials, search_seed(spec, draw), ctx.out / "tuning",
                              f"{key}-{variant_tag(cell.tag, spec, variant, cell.inputs)}",
                              seed_key=key, note=ctx.log), spec.tuning.batch)


def search_seed(spec: RunSpec, draw: int | None = None) -> int:
    """The samplers' seed: ``tuning.seed``, else the draw's final seed (per_seed) or the spec's
    first training seed (shared); the study's seed key adds (variant, lag, world, draw)."""
    if spec.tuning.seed is not None:
        return spec.tuning.seed
    return spec.seeds[0] if draw is None else draw


def validation_seeds(spec: RunSpec, draw: int | None = None) -> list[int]:
    """The ``tuning.seeds`` training seeds a candidate of ``draw``'s search is scored over:
    ``draw + VALIDATION_OFFSET · k`` for k = 1, 2, ... (per_seed; :func:`check_draws` keeps them
    off every final seed), or, for the one search of ``shared`` (``draw`` None), the spec's
    first seed and those after it (the first is a final seed, as in earlier versions)."""
    if draw is None:
        return [spec.seeds[0] + i for i in range(spec.tuning.seeds)]
    return [draw + VALIDATION_OFFSET * (i + 1) for i in range(spec.tuning.seeds)]


def check_draws(spec: RunSpec) -> None:
    """A ``ConfigError`` where a per-seed draw's validation seeds (:func:`validation_seeds`)
    hold a final seed: a candidate scored on a seed that is then evaluated. (Two draws sharing
    a validation seed would need s' = s + 1000·k for a k below ``tuning.seeds``: s' is then a
    validation seed of s's, and refused here.)"""
    if spec.tuning.draws != "per_seed":
        return
    for draw in spec.seeds:
        for seed in validation_seeds(spec, draw):
            if seed in spec.seeds:
                raise ConfigError(
                    f"spec seeds {spec.seeds}: {seed} is a final seed and also a validation seed "
                    f"of seed {draw}'s search (draw s is validated on seeds s + "
                    f"{VALIDATION_OFFSET}, s + {2 * VALIDATION_OFFSET}, ... with tuning.seeds "
                    f"{spec.tuning.seeds}): use final seeds less than {VALIDATION_OFFSET} apart, "
                    "or tuning.draws: shared")


def planned_runs(spec: RunSpec, variant: VariantSpec) -> int:
    """At most this many validation runs for the variant's searches in one cell (a duplicate
    suggestion costs none): per draw, ``trials`` — or the number of points of a space of lists,
    if fewer — times ``tuning.seeds``; times the draws (one per final seed, or one); none when
    the space has one point."""
    space = search_space(spec, variant)
    if single_point(space) is not None:
        return 0
    points = math.prod(len(r.values) if isinstance(r, Categorical) else spec.tuning.trials
                       for r in space.values())
    return min(spec.tuning.trials, points) * spec.tuning.seeds * len(draws(spec))


def tune_variants(ctx: RunContext, cell: LagCell, tuning_rows: list[dict]
                  ) -> dict[tuple[str, int], dict[str, Any]]:
    """Each (variant, final seed)'s chosen knobs for the cell — its own draw's choice, or the
    one search's for every seed (``shared``); every candidate's score goes to ``tuning_rows``
    (tuning.csv)."""
    spec, log = ctx.spec, ctx.log
    tuners = {(v.name, d): make_tuner(ctx, cell, v, d) for v in spec.variants
              for d in draws(spec)}
    tags = {v.name: variant_tag(cell.tag, spec, v, cell.inputs) for v in spec.variants}
    first, end = spec.student_days
    train, val = (first, end - 1), (end - 1, end)
    task = ctx.tasks[0]
    while True:
        asked = [(study, params) for study, t in tuners.items() for params in t.ask()]
        if not asked:
            break
        todo: list[StudentRun] = []
        keys: dict[tuple[str, int | None, str], list[str]] = {}
        for (name, draw), params in asked:
            blob = json.dumps(params, sort_keys=True)
            for seed in validation_seeds(spec, draw):
                # the first seed's key is the one earlier versions wrote: their ledger is reused
                seed_part = "" if seed == spec.seeds[0] else f"|s{seed}"
                key = f"tune|{name}|{cell.lag}|{blob}{seed_part}|{cell.world_key}{tags[name]}"
                keys.setdefault((name, draw, blob), []).append(key)
                if key in ctx.done:
                    log.run_done(None)
                else:
                    todo.append(cell.request(ctx, "tune", name, params, seed, train, val, key))
        _execute(ctx, todo)
        for (name, draw), params in asked:
            runs = keys[name, draw, json.dumps(params, sort_keys=True)]
            score = sum(ctx.done[k]["metrics"][f"ne/{task}/all"] for k in runs) / len(runs)
            tuners[name, draw].tell(params, score)
    chosen: dict[tuple[str, int], dict[str, Any]] = {}
    for (name, draw), t in tuners.items():
        best = t.best()
        for seed in spec.seeds if draw is None else [draw]:
            chosen[name, seed] = best
        tuning_rows += rows_of_search(t.search, name, cell.lag, cell.world, draw)
        if t.scored():
            log(f"  tuned {name}{'' if draw is None else f' (seed {draw})'}: {best} "
                f"(validation NE {min(s for _, s in t.scored()):.4f})")
    return chosen


def _execute(ctx: RunContext, runs: list[StudentRun]) -> None:
    def done(run: StudentRun, res: dict[str, Any]) -> None:
        ctx.record(run.key, res)
        ctx.log.run_done(res["run_seconds"] / ctx.executor.parallel)

    ctx.execute(runs, done)

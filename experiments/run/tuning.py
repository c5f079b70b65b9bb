"""The fair-comparison rule (DESIGN §6): every variant picks its knobs on the validation day
(the last student day) by the same search — an Optuna study of ``tuning.trials`` trials over its
methods' declared ranges (:mod:`gemkd.experiments.run.search`) — each candidate scored by the mean
validation NE of the first task over ``tuning.seeds`` training seeds.

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
from gemkd.experiments.run.results import record
from gemkd.experiments.run.search import Search, SearchTuner, single_point, study_name
from gemkd.experiments.run.tuning_table import tuning_rows as rows_of_search
from gemkd.experiments.spec.model import RunSpec, VariantSpec
from gemkd.transfer.methods.space import Categorical


def make_tuner(ctx: RunContext, cell: LagCell, variant: VariantSpec) -> SearchTuner:
    """The variant's Optuna study for the cell, kept under ``RUN_DIR/tuning`` (a killed run
    resumes it); the study's name carries the variant's input tag (:func:`variant_tag`), so a
    changed spec starts a new search instead of continuing another's, and a variant added to
    the spec leaves the others' studies as they were, while its samplers are seeded by
    (variant, lag, world) alone: the tag also hashes gemkd's source, and a search reseeded by
    every edit would move a run's choices (and its results) with code that computes the same
    numbers. The seed is ``tuning.seed``, by default the spec's first training seed."""
    spec = ctx.spec
    key = study_name(variant.name, cell.lag, cell.world)
    return SearchTuner(Search(search_space(spec, variant), spec.tuning.sampler,
                              spec.tuning.trials, search_seed(spec), ctx.out / "tuning",
                              f"{key}-{variant_tag(cell.tag, spec, variant, cell.inputs)}",
                              seed_key=key))


def search_seed(spec: RunSpec) -> int:
    """The samplers' seed: ``tuning.seed``, else the spec's first training seed."""
    return spec.seeds[0] if spec.tuning.seed is None else spec.tuning.seed


def validation_seeds(spec: RunSpec) -> list[int]:
    """The ``tuning.seeds`` training seeds a candidate is scored over (the first is the
    spec's first seed)."""
    return [spec.seeds[0] + i for i in range(spec.tuning.seeds)]


def planned_runs(spec: RunSpec, variant: VariantSpec) -> int:
    """At most this many validation runs for the variant's search (a duplicate suggestion
    costs none): ``trials`` — or the number of points of a space of lists, if fewer — times
    ``tuning.seeds``; none when the space has one point."""
    space = search_space(spec, variant)
    if single_point(space) is not None:
        return 0
    points = math.prod(len(r.values) if isinstance(r, Categorical) else spec.tuning.trials
                       for r in space.values())
    return min(spec.tuning.trials, points) * len(validation_seeds(spec))


def tune_variants(ctx: RunContext, cell: LagCell, tuning_rows: list[dict]
                  ) -> dict[str, dict[str, Any]]:
    """Each variant's chosen knobs for the cell; every candidate's score goes to
    ``tuning_rows`` (tuning.csv)."""
    spec, log = ctx.spec, ctx.log
    tuners = {v.name: make_tuner(ctx, cell, v) for v in spec.variants}
    tags = {v.name: variant_tag(cell.tag, spec, v, cell.inputs) for v in spec.variants}
    first, end = spec.student_days
    train, val = (first, end - 1), (end - 1, end)
    task = ctx.tasks[0]
    while True:
        asked = [(name, params) for name, t in tuners.items() for params in t.ask()]
        if not asked:
            break
        todo: list[StudentRun] = []
        keys: dict[tuple[str, str], list[str]] = {}
        for name, params in asked:
            blob = json.dumps(params, sort_keys=True)
            for seed in validation_seeds(spec):
                # the first seed's key is the one earlier versions wrote: their ledger is reused
                seed_part = "" if seed == spec.seeds[0] else f"|s{seed}"
                key = f"tune|{name}|{cell.lag}|{blob}{seed_part}|{cell.world_key}{tags[name]}"
                keys.setdefault((name, blob), []).append(key)
                if key in ctx.done:
                    log.run_done(None)
                else:
                    todo.append(cell.request(ctx, "tune", name, params, seed, train, val, key))
        _execute(ctx, todo)
        for name, params in asked:
            runs = keys[name, json.dumps(params, sort_keys=True)]
            score = sum(ctx.done[k]["metrics"][f"ne/{task}/all"] for k in runs) / len(runs)
            tuners[name].tell(params, score)
    chosen = {}
    for name, t in tuners.items():
        chosen[name] = t.best()
        tuning_rows += rows_of_search(t.search, name, cell.lag, cell.world)
        if t.scored():
            log(f"  tuned {name}: {chosen[name]} (validation NE "
                f"{min(s for _, s in t.scored()):.4f})")
    return chosen


def _execute(ctx: RunContext, runs: list[StudentRun]) -> None:
    def done(run: StudentRun, res: dict[str, Any]) -> None:
        ctx.done[run.key] = record(ctx.out / "runs.jsonl", run.key, res)
        ctx.log.run_done(res["run_seconds"] / ctx.executor.parallel)

    ctx.execute(runs, done)

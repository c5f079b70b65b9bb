"""``run_experiment``: per world: data → per lag: teacher(s) → store → codes → tuning →
variants × seeds.

Every expensive step is cached by its config hash under ``RUN_DIR/cache`` (reruns and resumed
crashes skip it); each finished student run is appended to ``RUN_DIR/runs.jsonl``, so a killed
run continues where it stopped and ends with the same ``results.csv``. Every file of the run
directory is written through :class:`~gemkd.experiments.run_dir.RunDir`. Student runs go to an
executor (this process, local workers or Ray) in batches — a tuning round, the final runs of a
lag — and come back in any order: each is seeded by its own key, so the results do not depend
on where or in which order they ran. One run at a time owns a run directory (a lock that dies
with its process); a second is refused, naming the first.
"""

from __future__ import annotations

import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from gemkd.experiments.run.context import LagCell, RunContext
from gemkd.experiments.run.data_ratio import rows_in, teacher_student_rows
from gemkd.experiments.run.data_sources import data_plan
from gemkd.experiments.run.evaluation import (
    eval_metrics,
    feature_oracle_metrics,
    has_oracle,
    oracle_logits,
    store_logits,
)
from gemkd.experiments.run.executors import Executor, Serial
from gemkd.experiments.run.inputs import inputs_tag, lag_inputs, variant_tag
from gemkd.experiments.run.jobs import StudentRun
from gemkd.experiments.run.kept_students import keep_students
from gemkd.experiments.run.methods import variant_needs
from gemkd.experiments.run.perturbed import copy_teacher_sums, finish, open_repeat, repeat_cell
from gemkd.experiments.run.preflight import DataMismatch, check_spec
from gemkd.experiments.run.prepare import fm_domains, prepare_worlds, world_steps
from gemkd.experiments.run.progress import Progress, clock
from gemkd.experiments.run.results import References, derive, rows_of
from gemkd.experiments.run.spec_plan import RunPlan
from gemkd.experiments.run.tracking import log_results, run_tracker
from gemkd.experiments.run.tuning import planned_runs, tune_variants
from gemkd.experiments.run.tuning_rows import TUNING_COLUMNS
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.experiments.teacher import teacher_curve
from gemkd.transfer.data.schema import day_range
from gemkd.transfer.errors import GemkdError
from gemkd.transfer.io.disk_full import disk_full_error
from gemkd.transfer.io.lock import exclusive
from gemkd.transfer.training import training_base_rates

TEACHER_NEEDS = {"teacher", "teacher_emb"}


def run_experiment(spec: RunSpec, out: str | Path, sync: Callable[[], None] | None = None,
                   executor: Executor | None = None) -> pd.DataFrame:
    """Run an experiment into its run directory (``gemkd run``).

    Every check of the spec runs before any work. Where the data's days, domains and tasks are
    known only once it is built (real data), a mismatch found then removes the run directory this
    call created, as does any error before a step or student run finished.

    Parameters
    ----------
    spec
        The experiment (:func:`gemkd.experiments.spec.load_spec`).
    out
        The run directory: created, or resumed when a run of the same spec is there.
    sync
        Called after every finished step and student run (e.g. a remote directory's mirror).
    executor
        Runs the student runs (None: one after another in this process;
        :func:`gemkd.experiments.run.executors.make_executor`).

    Returns
    -------
    pandas.DataFrame
        The results table, also written to ``out/results.csv``.

    Raises
    ------
    GemkdError
        A ConfigError or DataError naming the key, file or column at fault.
    """
    out = Path(out)
    run = RunDir(out)  # a directory of a newer layout is refused here, before any work
    plan = check_spec(spec)
    tracker = run_tracker(spec, run)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    executor = executor or Serial()
    aborted = True  # until _run returns: then the workers' runs in flight are stopped
    try:
        with exclusive(run.lock_path, str(out)):
            results = _run(spec, plan, out, tracker, sync, executor)
        aborted = False
        return results
    except Exception as e:  # bad input found only once the data was read, or a full disk
        error = e if isinstance(e, GemkdError) else disk_full_error(e, out)
        if error is None:
            raise
        if created and (isinstance(error, DataMismatch) or not _holds_work(run)):
            shutil.rmtree(out, ignore_errors=True)
        if error is e:
            raise
        raise error from e
    finally:
        executor.close(abort=aborted)


def count_work(spec: RunSpec, makes_data: bool) -> tuple[int, int]:
    """``(student runs, cached steps)`` the run will go through, before any starts: tuning
    trials (at most; a repeated suggestion costs no run) per variant × draw (one per final seed,
    or one) and final runs per variant × seed, per lag (twice under ``robustness.perturb``);
    the data step and, per lag, teacher + store, domain FMs and codes as the variants need;
    all of it once per world."""
    per_lag = sum(planned_runs(spec, v) + len(spec.seeds) for v in spec.variants)
    per_lag *= 2 if spec.robustness.perturb else 1
    needs = set().union(*(variant_needs(v) for v in spec.variants))
    lag_steps = (2 if spec.teacher.store is None else 0)
    lag_steps += any(v.teacher == "domain_fm" for v in spec.variants) + ("codes" in needs)
    lag_steps += "pairs" in needs  # the SOLARIS pair step
    worlds = len(spec.worlds)
    return (per_lag * len(spec.lags) * worlds,
            (int(makes_data) + lag_steps * len(spec.lags)) * worlds)


def _holds_work(run: RunDir) -> bool:
    """A finished step or student run: what a rerun would reuse (then the directory stays)."""
    return run.has_done_steps() or run.ledger_path.is_file()


def _run(spec: RunSpec, plan: RunPlan, out: Path, tracker, sync, executor: Executor
         ) -> pd.DataFrame:
    runs, n_steps = count_work(spec, data_plan(spec).make is not None)
    run = RunDir(out)
    log = Progress(run.log_path, runs, n_steps, on_change=sync)
    ctx = RunContext(spec, plan, out, log, executor, tracker, run.ledger())
    ctx.perturbed = open_repeat(ctx)
    try:
        return _steps(ctx)
    except Exception as e:  # the run's log ends with what stopped it, as stderr does
        said = e if isinstance(e, GemkdError) else disk_full_error(e, out)
        log.record(f"error: {said}" if said is not None else f"error: {type(e).__name__}: {e}")
        raise
    finally:
        log.close()


def _steps(ctx: RunContext) -> pd.DataFrame:
    spec, run, log = ctx.spec, ctx.run, ctx.log
    started = time.time()  # a step's DONE written after it was run by this invocation
    run.write_layout()  # run.json: the layout a reader checks
    run.write_spec(spec.to_dict())
    run.write_environment(_environment(ctx.executor.threads))
    run.write_command(sys.argv)
    worlds = spec.worlds
    log(f"experiment {spec.name}: variants {spec.variant_names}, seeds {spec.seeds}, "
        f"lags {spec.lags}" + (f", worlds {worlds}" if worlds != [None] else ""))
    rows: list[dict] = []
    tuning_rows: list[dict] = []
    with ctx.phase("steps"):
        prepare_worlds(ctx)
    for world in worlds:
        rows += _world(ctx, world, tuning_rows)
    run.write_tuning(pd.DataFrame(tuning_rows, columns=list(TUNING_COLUMNS)))
    results = derive(pd.DataFrame(rows))
    run.write_results(results)
    if ctx.perturbed is not None:
        finish(ctx.perturbed, spec, derive)
    log_results(ctx.tracker, results, run)
    log(f"wrote {run.results_path} ({len(results)} rows)")
    _write_phases(ctx, started)
    return results


def _write_phases(ctx: RunContext, started: float) -> None:
    """``phases.json``: this invocation's wall time per phase; a rerun that trained nothing
    (every step and student run reused) keeps the file of the run that did the work, which
    ``benchmarks/bench_sweep.py`` reads, instead of overwriting it with seconds of reading."""
    run, log = ctx.run, ctx.log
    line = ", ".join(f"{k} {clock(v)}" for k, v in ctx.phases.items())
    steps_run = sum(p.stat().st_mtime >= started for p in ctx.cache.glob("*/DONE"))
    if not log.trained and not steps_run and run.phases_path.is_file():
        log(f"wall time per phase: {line}; every step and student run was reused, so "
            f"{run.PHASES} keeps the times of the run that trained them")
        return
    log(f"wall time per phase: {line} ({run.PHASES})")
    run.write_phases(ctx.phases)


def _world(ctx: RunContext, world: int | None, tuning_rows: list[dict]) -> list[dict]:
    """Every lag of one world (the data's own when ``world`` is None): its rows of results."""
    spec, log = ctx.spec, ctx.log
    if world is not None:
        log(f"=== world {world}")
    with ctx.phase("steps"):
        data, data_key, schema = world_steps(ctx, world)
    if schema.negatives is not None:  # the report says what NE is measured against
        ctx.run.write_sampled_negatives(schema.negatives)
    tasks, domains = ctx.tasks, schema.domains
    only = [spec.student_domain] if spec.student_domain else None  # the vertical's own traffic
    eval_days = day_range(spec.eval_days)
    base_rates = training_base_rates(data, day_range(spec.student_days), tasks, only)
    oracle, feature = {}, {}
    if has_oracle(data):  # the floor, and what a model could reach from what it sees
        oracle = eval_metrics(data, eval_days, tasks, domains, base_rates, oracle_logits, only)
        feature = feature_oracle_metrics(data, eval_days, tasks, domains, base_rates, only)
    label = world if world is not None else int(data_key.get("seed", 0) or 0)
    student_rows = rows_in(data, day_range(spec.student_days), only)
    rows = []
    for lag in spec.lags:
        seen = ctx.plan.seen[lag]
        train_end = seen[1]
        if spec.teacher.store is None:
            ratio = teacher_student_rows(data, seen, spec.teacher_protocol,
                                         day_range(spec.student_days), student_rows)
            ctx.run.record_teacher_data(label, lag, ratio)
            log(f"== teacher lag {lag}: teacher learns from days [{seen[0]}, {seen[1]}) "
                f"({spec.teacher_protocol}; {ratio['teacher_rows']:,} rows, "
                f"{ratio['ratio']:.1f}x the student's {student_rows:,})")
        else:
            log(f"== teacher lag {lag}: the imported store's teacher")
        with ctx.phase("steps"):
            inputs = lag_inputs(ctx, lag, data, data_key, fm_domains(spec, domains))
        if inputs.ckpt is not None:  # a trained teacher: its validation curve, epoch kept
            fit = teacher_curve.fit_entry(inputs.ckpt)
            ctx.run.record_teacher_fit(label, lag, fit)
            log(teacher_curve.summary_line(fit))
        tag = inputs_tag(spec, inputs, ctx.executor.threads)
        cell = LagCell(label, lag, data, train_end, inputs, tag, base_rates,
                       "" if world is None else f"w{world}|")
        sources = {name: eval_metrics(data, eval_days, tasks, domains, base_rates,
                                      store_logits(store, tasks), only,
                                      clusters=cell.clusters(ctx.run, f"teacher__{name}"))
                   for name, store in inputs.stores.items()}
        for name, m in sources.items():
            log(f"  {name} teacher NE on evaluation days: "
                f"{ {t: round(m[f'ne/{t}/all'], 4) for t in tasks} }")
        with ctx.phase("tuning"):
            chosen = tune_variants(ctx, cell, tuning_rows)
        with ctx.phase("final runs"):
            finals = _final_runs(ctx, cell, chosen)
            keep_students(ctx.run, ctx.spec, ctx.done, cell.world, cell.lag, finals)
        refs = References(sources["gem"], oracle, feature, tasks, only or domains, label, lag)
        rows += _rows(ctx, finals, refs, sources)
        repeat = ctx.perturbed
        if repeat is not None:  # robustness: the cell's search and final runs, perturbed
            p_cell = repeat_cell(cell, repeat.perturb)
            copy_teacher_sums(ctx, repeat, cell)
            with ctx.phase("perturbed"):
                p_chosen = tune_variants(repeat, p_cell, repeat.tuning_rows)
                repeat.rows += _rows(repeat, _final_runs(repeat, p_cell, p_chosen), refs,
                                     sources)
    return rows


def _rows(ctx: RunContext, finals: dict[tuple[str, int], str], refs: References,
          sources: dict[str, dict]) -> list[dict]:
    """results.csv's rows of a cell's final runs (``finals``: their ledger keys)."""
    rows = []
    for variant in ctx.spec.variants:
        source = sources[variant.teacher] if variant_needs(variant) & TEACHER_NEEDS else {}
        for seed in ctx.spec.seeds:
            rows += rows_of(variant.name, seed, ctx.done[finals[variant.name, seed]], refs,
                            source)
    return rows


def _final_runs(ctx: RunContext, cell: LagCell, chosen: dict[tuple[str, int], dict[str, Any]]
                ) -> dict[tuple[str, int], str]:
    """Train every variant × seed of the cell (those not in the ledger) with its own chosen
    knobs, all in one batch; returns each one's ledger key."""
    spec, log = ctx.spec, ctx.log
    keys, todo = {}, []
    for variant in spec.variants:
        for seed in spec.seeds:
            tag = variant_tag(cell.tag, spec, variant, cell.inputs)  # its own inputs only
            key = f"final|{variant.name}|{seed}|{cell.lag}|{cell.world_key}{tag}"
            keys[variant.name, seed] = key
            if key in ctx.done:
                log(f"[cached] {variant.name} seed {seed} (runs.jsonl)")
                log.run_done(None)
            else:
                todo.append(cell.request(ctx, "final", variant.name, chosen[variant.name, seed],
                                         seed, day_range(spec.student_days),
                                         day_range(spec.eval_days), key))
    task = ctx.tasks[0]

    def done(run: StudentRun, res: dict[str, Any]) -> None:
        ctx.record(run.key, res)
        log(f"  {run.variant:15s} seed {run.seed}: NE {task} "
            f"{res['metrics'][f'ne/{task}/all']:.4f} ({res['examples_per_second']:.0f} ex/s)")
        log.run_done(res["run_seconds"] / ctx.executor.parallel)

    ctx.execute(todo, done)
    return keys


def _environment(run_threads: int) -> dict[str, Any]:
    """Versions and thread counts: ``threads`` this process's (the cached steps'),
    ``run_threads`` each student run's."""
    import lightning
    import torch

    from gemkd.experiments.version import __version__

    return {"gemkd": __version__, "python": platform.python_version(),
            "platform": platform.platform(), "torch": torch.__version__,
            "lightning": lightning.__version__, "threads": torch.get_num_threads(),
            "run_threads": run_threads}

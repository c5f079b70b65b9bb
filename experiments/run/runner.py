"""``run_experiment``: data → teacher(s) per lag → store → codes → tuning → variants × seeds.

Every expensive step is cached by its config hash under ``RUN_DIR/cache`` (reruns and resumed
crashes skip it); each finished student run is appended to ``RUN_DIR/runs.jsonl``, so a killed
run continues where it stopped and ends with the same ``results.csv``. One run at a time owns a
run directory (a lock that dies with its process); a second is refused, naming the first.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.run import steps
from experiments.run.inputs import count_work, inputs_tag, lag_inputs
from experiments.run.methods import variant_needs
from experiments.run.progress import Progress
from experiments.run.results import derive, load_done, record, rows_of
from experiments.run.student import StudentJob, train_student
from experiments.run.tracking import log_results, run_tracker, student_logger
from experiments.run.tuning import tune
from experiments.run.validate import DataMismatch, check_data, check_spec, data_name
from experiments.spec.model import RunSpec
from transfer.errors import GemkdError
from transfer.io.lock import exclusive
from transfer.training import training_base_rates

LOCK = ".lock"
TEACHER_NEEDS = {"teacher", "teacher_emb"}


def run_experiment(spec: RunSpec, out: str | Path,
                   sync: Callable[[], None] | None = None) -> pd.DataFrame:
    """Run ``spec`` into the run directory ``out`` (created; a rerun resumes) and return the
    results table (also written to ``out/results.csv``). Every check of the spec runs before
    any work; where the data's days, domains and tasks are known only once it is built (real
    data), a mismatch found then removes the run directory this call created, as does any error
    before a step or student run finished. ``sync`` is called
    after every finished step and student run (a remote run directory's mirror)."""
    out = Path(out)
    check_spec(spec)
    tracker = run_tracker(spec, out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive(out / LOCK, str(out)):
            return _run(spec, out, tracker, sync)
    except GemkdError as e:  # bad input found only once the data was read
        if created and (isinstance(e, DataMismatch) or not _holds_work(out)):
            shutil.rmtree(out, ignore_errors=True)
        raise


def _holds_work(out: Path) -> bool:
    """A finished step or student run: what a rerun would reuse (then the directory stays)."""
    return any((out / "cache").glob("*/DONE")) or (out / "runs.jsonl").is_file()


def _run(spec: RunSpec, out: Path, tracker, sync) -> pd.DataFrame:
    plan = steps.data_plan(spec)
    runs, n_steps = count_work(spec, plan.make is not None)
    log = Progress(out / "log.txt", runs, n_steps, on_change=sync)
    try:
        return _steps(spec, out, out / "cache", log, tracker)
    except Exception as e:  # the run's log ends with what stopped it, as stderr does
        log.record(f"error: {e}" if isinstance(e, GemkdError) else
                   f"error: {type(e).__name__}: {e}")
        raise
    finally:
        log.close()


def _steps(spec: RunSpec, out: Path, cache: Path, log: Progress, tracker) -> pd.DataFrame:
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    (out / "environment.json").write_text(json.dumps(_environment(), indent=2))
    (out / "command.txt").write_text(" ".join(sys.argv) + "\n")
    log(f"experiment {spec.name}: variants {spec.variant_names}, seeds {spec.seeds}, "
        f"lags {spec.lags}")

    data, data_key = steps.prepare_data(spec, cache, log)
    from transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(data)
    check_data(spec, schema.days, schema.domains, schema.tasks, data_name(spec), mismatch=True)
    tasks, domains = list(spec.student_tasks), schema.domains
    only = [spec.student_domain] if spec.student_domain else None  # the vertical's own traffic
    student_days, eval_days = tuple(spec.student_days), tuple(spec.eval_days)
    base_rates = training_base_rates(data, student_days, tasks, only)
    oracle, feature = {}, {}
    if steps.has_oracle(data):  # the floor, and what a model could reach from what it sees
        oracle = steps.eval_metrics(data, eval_days, tasks, domains, base_rates,
                                    steps.oracle_logits, only)
        feature = steps.feature_oracle_metrics(data, eval_days, tasks, domains, base_rates, only)
    done = load_done(out / "runs.jsonl")
    tuning_rows: list[dict] = []
    rows: list[dict] = []
    for lag in spec.lags:
        first, train_end = spec.teacher_window(lag)
        log(f"== teacher lag {lag}: teacher learns from days [{first}, {train_end})")
        inputs = lag_inputs(spec, lag, data, data_key, only or domains, cache, log, tracker)
        sources = {name: steps.eval_metrics(data, eval_days, tasks, domains, base_rates,
                                            steps.store_logits(store, tasks), only)
                   for name, store in inputs.stores.items()}
        for name, m in sources.items():
            log(f"  {name} teacher NE on evaluation days: "
                f"{ {t: round(m[f'ne/{t}/all'], 4) for t in tasks} }")
        tag = inputs_tag(spec, inputs)
        for variant in spec.variants:
            params = tune(spec, variant, lag, train_end, data, inputs, base_rates, done, out,
                          log, tuning_rows, tag, tracker)
            for seed in spec.seeds:
                key = f"final|{variant.name}|{seed}|{lag}|{tag}"
                if key not in done:
                    job = StudentJob(variant, params, seed, student_days, eval_days,
                                     train_end - 1)
                    curve = out / "curves" / f"{variant.name}_seed{seed}_lag{lag}.csv"
                    logger = student_logger(tracker, "final", variant.name, seed, lag, params)
                    t0 = time.monotonic()
                    res = train_student(spec, job, data, inputs, base_rates, curve,
                                        logger=logger)
                    done[key] = record(out / "runs.jsonl", key, res)
                    log(f"  {variant.name:15s} seed {seed}: NE {tasks[0]} "
                        f"{res['metrics'][f'ne/{tasks[0]}/all']:.4f} "
                        f"({res['examples_per_second']:.0f} ex/s)")
                    log.run_done(time.monotonic() - t0)
                else:
                    log(f"[cached] {variant.name} seed {seed} (runs.jsonl)")
                    log.run_done(None)
                source = sources[variant.teacher] if variant_needs(variant) & TEACHER_NEEDS \
                    else {}
                rows += rows_of(variant.name, seed, lag, done[key], sources["gem"], source,
                                oracle, feature, tasks, only or domains)
    tuning_columns = ["variant", "teacher_lag_days", "param", "value", "chosen", "val_ne"]
    pd.DataFrame(tuning_rows, columns=tuning_columns).to_csv(out / "tuning.csv", index=False)
    results = derive(pd.DataFrame(rows))
    results.to_csv(out / "results.csv", index=False)
    log_results(tracker, results, out)
    log(f"wrote {out / 'results.csv'} ({len(results)} rows)")
    return results


def _environment() -> dict[str, Any]:
    import lightning
    import torch

    from experiments.version import __version__

    return {"gemkd": __version__, "python": platform.python_version(),
            "platform": platform.platform(), "torch": torch.__version__,
            "lightning": lightning.__version__, "threads": torch.get_num_threads()}

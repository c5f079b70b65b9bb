"""The fair-comparison rule (DESIGN §6): every variant picks its knobs from the same kind of
short lists on the last student day (validation), first seed only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from experiments.run.methods import grid
from experiments.run.results import record
from experiments.run.student import Inputs, StudentJob, train_student
from experiments.run.tracking import student_logger
from experiments.spec.model import RunSpec, VariantSpec


def tune(spec: RunSpec, variant: VariantSpec, lag: int, train_end: int, data: Path,
         inputs: Inputs, base_rates: dict[str, float], done: dict, out: Path, log,
         tuning_rows: list[dict], tag: str, tracker=None) -> dict[str, Any]:
    """The variant's knobs: the only combination, or the one with the lowest validation NE of
    the first task (each candidate trained once through the student days but the last).
    ``log.run_done`` (a progress log) hears of each candidate."""
    run_done = getattr(log, "run_done", lambda seconds: None)
    candidates = grid(spec, variant)
    if len(candidates) <= 1:
        params = candidates[0] if candidates else {}
        for k, v in params.items():
            tuning_rows.append({"variant": variant.name, "teacher_lag_days": lag, "param": k,
                                "value": v, "chosen": True, "val_ne": float("nan")})
        return params
    first, end = spec.student_days
    task = spec.student_tasks[0]
    scores = []
    for params in candidates:
        key = f"tune|{variant.name}|{lag}|{json.dumps(params, sort_keys=True)}|{tag}"
        if key not in done:
            job = StudentJob(variant, params, spec.seeds[0], (first, end - 1), (end - 1, end),
                             train_end - 1)
            logger = student_logger(tracker, "tune", variant.name, spec.seeds[0], lag, params)
            t0 = time.monotonic()
            res = train_student(spec, job, data, inputs, base_rates, logger=logger)
            done[key] = record(out / "runs.jsonl", key, res)
            run_done(time.monotonic() - t0)
        else:
            run_done(None)
        scores.append(done[key]["metrics"][f"ne/{task}/all"])
    best = min(range(len(candidates)), key=lambda i: scores[i])
    for i, (params, score) in enumerate(zip(candidates, scores, strict=True)):
        for k, v in params.items():
            tuning_rows.append({"variant": variant.name, "teacher_lag_days": lag, "param": k,
                                "value": v, "chosen": i == best, "val_ne": score})
    log(f"  tuned {variant.name}: {candidates[best]} (validation NE {scores[best]:.4f})")
    return candidates[best]

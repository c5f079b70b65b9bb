"""Every world's cached steps side by side before the student runs (DESIGN §6.2).

Why: a run replicated over worlds spends most of its wall time in each world's upstream steps
(data, the streaming teacher, its stores, domain FMs, codes, SOLARIS pairs), which the runner's
world loop would otherwise run one world after another in one process while the other cores
idle. Here each world's steps run as one job on the run's local worker processes — the same
functions, the same cache keys, at the same torch thread count — so the world loop that follows
finds every step cached and only trains students. The numbers are those of a serial run bit for
bit: a step's key holds its config, its code and its thread count, and each job writes its own
cache folders (a world's steps never share one with another world's).

Only where it is the same computation: local workers (``--workers`` ≥ 2) whose torch threads
are this process's (else the keys would differ from the world loop's), no tracker (the teacher
fit is logged from the run's own process), more than one world. Each job's lines go to
``RUN_DIR/logs/prepare_world<W>.txt``; the run's log says when each world's steps finished.
"""

from __future__ import annotations

import time
from typing import Any

from gemkd.experiments.run.context import RunContext
from gemkd.experiments.run.data_sources import prepare_data
from gemkd.experiments.run.executors import LocalProcesses, Serial
from gemkd.experiments.run.inputs import lag_inputs
from gemkd.experiments.run.positives import check_positives
from gemkd.experiments.run.preflight import check_data, data_name, read_days
from gemkd.experiments.run.progress import PlainLog, clock
from gemkd.experiments.run.spec_plan import RunPlan
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.run_spec import RunSpec


def fm_domains(spec: RunSpec, domains: list[str]) -> list[str]:
    """The domains a lag's domain FMs are fitted for: the student's own, else every one."""
    return [spec.student_domain] if spec.student_domain else list(domains)


def world_steps(ctx: RunContext, world: int | None) -> tuple[Any, dict, Any]:
    """One world's data step, checked against the spec and, for the days the run reads,
    against its own record (sha256 of each part, rows, unique ids): ``(data, data_key,
    schema)``."""
    from gemkd.transfer.data.audit import check_days
    from gemkd.transfer.data.schema import DatasetSchema

    spec = ctx.spec
    data, data_key = prepare_data(spec, ctx.cache, ctx.log, world)
    schema = DatasetSchema.load(data)
    check_data(spec, schema.days, schema.domains, schema.tasks, data_name(spec), mismatch=True)
    if (note := check_days(data, read_days(spec))) is not None:
        ctx.log(f"note: {note}")
    check_positives(spec, data, schema, data_name(spec))
    return data, data_key, schema


def prepare_world(spec: RunSpec, plan: RunPlan, out: str, world: int | None
                  ) -> dict[str, Any]:
    """Run ``world``'s cached steps (data, then every lag's :func:`lag_inputs`) into ``out``'s
    cache; a worker's job. Returns its wall seconds."""
    t0 = time.perf_counter()
    run = RunDir(out)
    path = run.prepare_log_path(world)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        def write(msg: str) -> None:
            f.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
            f.flush()

        ctx = RunContext(spec, plan, run.path, PlainLog(write), Serial())
        data, data_key, schema = world_steps(ctx, world)
        for lag in spec.lags:
            write(f"== teacher lag {lag}")
            lag_inputs(ctx, lag, data, data_key, fm_domains(spec, schema.domains))
        seconds = time.perf_counter() - t0
        write(f"world {world}: every step done in {clock(seconds)}")
    return {"world": world, "seconds": seconds}


def side_by_side(ctx: RunContext) -> str | None:
    """Why the worlds' steps cannot run side by side here (None: they can)."""
    import torch

    ex = ctx.executor
    if len(ctx.spec.worlds) < 2:
        return "one world"
    if not isinstance(ex, LocalProcesses) or ex.parallel < 2:
        return "no local worker processes (--workers 1 or --executor ray)"
    if ctx.tracker is not None:
        return "a tracker logs the teacher fit from this process"
    if ex.threads != torch.get_num_threads():
        return (f"the workers' torch threads ({ex.threads}) are not this process's "
                f"({torch.get_num_threads()}): the steps' keys would differ (pass --threads)")
    return None


def prepare_worlds(ctx: RunContext) -> None:
    """Every world's steps on the run's workers, at most ``parallel`` at a time (else they run
    in the world loop, the log saying why). A failed world's error is raised here, as the
    world loop would have raised it."""
    why = side_by_side(ctx)
    worlds = ctx.spec.worlds
    if why is not None:
        if len(worlds) > 1:
            ctx.log(f"the worlds' steps run one world after another: {why}")
        return
    assert isinstance(ctx.executor, LocalProcesses)
    ctx.log(f"the steps of worlds {worlds} side by side on {ctx.executor.parallel} workers "
            f"(each world's lines: {ctx.run.logs_dir}/prepare_world<W>.txt)")
    jobs = [(ctx.spec, ctx.plan, str(ctx.out), w) for w in worlds]
    for res in ctx.executor.map(prepare_world, jobs):
        ctx.log(f"  world {res['world']}: steps done in {clock(res['seconds'])}")

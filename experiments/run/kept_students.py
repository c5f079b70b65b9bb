"""The final students a run keeps (spec ``keep_students``), for ``gemkd student export``.

Why: a report says which variant wins; the student that won is what a user takes to serving.
Every final run with a path to keep its student (:attr:`StudentRun.student`) writes, in the
worker that trained it, the weights it was evaluated with (the weight average where the spec
sets ``ema_decay``: a pack's member after ``use_average``, Lightning's module after its fit)
and what rebuilds the serving model: the student's class_path and init_args, the methods that
feed it features, the data, codes and days it read. Only the serving parts are kept (the
student and the feature methods' weights: an auxiliary head or a Student Adapter is training
machinery, never served). The ``median`` policy then keeps, once every seed of a variant has
finished, the seed of median NE on the first task (the lower median for an even count): the
typical student, not the luckiest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gemkd.experiments.run_dir import write_student_file

if TYPE_CHECKING:
    from torch import nn

    from gemkd.experiments.run_dir import RunDir
    from gemkd.experiments.spec.run_spec import RunSpec

#: A :class:`~gemkd.experiments.run.jobs.StudentRun` (duck-typed: jobs calls this module, in
#: the worker that trained the run, so it cannot import the class back).
StudentRun = Any

#: the payload's layout (``gemkd student export`` refuses a newer one)
FORMAT_VERSION = 1


def feeding_methods(module: nn.Module) -> list[int]:
    """Indices of the module's transfer methods that feed the student features (their
    ``features`` overridden): what serving computes besides the student."""
    from gemkd.transfer.methods import TransferMethod

    methods = getattr(module, "transfer_methods", ())
    return [i for i, m in enumerate(methods) if type(m).features is not TransferMethod.features]


def student_payload(run: StudentRun, module: nn.Module, metrics: dict[str, Any]
                    ) -> dict[str, Any]:
    """What a kept student file holds (tensors and plain values only)."""
    from gemkd.experiments.run.methods import method_class, method_defaults
    from gemkd.experiments.run.train_knobs import with_train_knobs

    spec = with_train_knobs(run.spec, run.params)
    feeding = feeding_methods(module)
    keep = ("model.", *(f"methods.{i}." for i in feeding))
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()
             if k.startswith(keep)}
    config = getattr(module, "student_config", None) or {
        "class_path": spec.student.class_path, "init_args": dict(spec.student.init_args)}
    variant = spec.variant(run.variant)
    features = []
    for i in feeding:  # each as build_methods made it: its init_args and tuned knobs
        m = variant.methods[i]
        cls = method_class(m)
        args = {**method_defaults(spec, m), **m.init_args,
                **{k: v for k, v in run.params.items() if k in cls.tunable
                   and k not in m.init_args}}
        features.append({"index": i, "class_path": m.class_path, "init_args": args})
    return {
        "format_version": FORMAT_VERSION,
        "variant": run.variant, "seed": run.seed, "lag": run.lag, "world": run.world,
        "params": {k: v for k, v in run.params.items() if isinstance(v, int | float | str)},
        "student": {"class_path": config["class_path"], "init_args": dict(config["init_args"])},
        "features": features,
        "state_dict": state,
        "tasks": list(spec.student_tasks), "student_domain": spec.student_domain,
        "data": run.data, "codes": run.codes, "max_events": spec.repr.max_events,
        "train_days": list(run.train_days), "eval_days": list(run.eval_days),
        "trained_until_day": run.trained_until_day, "base_rates": dict(run.base_rates),
        "ema_decay": spec.ema_decay, "batch_size": spec.batch_size,
        "metrics": {k: float(v) for k, v in metrics.items()},
    }


def save_student(run: StudentRun, module: nn.Module, metrics: dict[str, Any]) -> None:
    """Write ``run``'s student to its path (no-op without one)."""
    if run.student is not None:
        write_student_file(run.student, student_payload(run, module, metrics))


def median_seed(ne_by_seed: dict[int, float]) -> int:
    """The seed of median NE (the lower median of an even count; NaN counts as worst, ties go
    to the smaller seed)."""
    order = sorted(ne_by_seed, key=lambda s: (math.isnan(ne_by_seed[s]), ne_by_seed[s], s))
    return order[(len(order) - 1) // 2]


def keep_students(run: RunDir, spec: RunSpec, done: Mapping[str, dict[str, Any]],
                  world: int, lag: int | float,
                  finals: dict[tuple[str, int], str]) -> None:
    """Apply ``keep_students`` to a (world, lag) cell's final students once all have finished
    (``done``: the ledger's records by key; ``finals``: each (variant, seed)'s key): under
    ``median`` drop every seed's file but the median-NE seed's, per variant."""
    if spec.keep_students != "median":
        return
    metric = f"ne/{spec.student_tasks[0]}/all"
    drop = []
    for variant in spec.variants:
        ne = {s: float(done[finals[variant.name, s]]["metrics"].get(metric, math.nan))
              for s in spec.seeds}
        kept = median_seed(ne)
        drop += [run.student_path(world, lag, variant.name, s)
                 for s in spec.seeds if s != kept]
    run.remove_students(drop)

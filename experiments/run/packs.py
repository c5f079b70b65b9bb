"""Student runs grouped into packs and a pack run as one job (DESIGN §6, §8).

Why: every seed and trial of one variant of one lag streams the same batches in the same order;
a pack (:class:`gemkd.transfer.packs.pack.PackedDistill`) trains them in one pass, its
members' steps vmapped (batched, :data:`BATCHED`). A run alone is a batched pack of one
(:func:`run_alone`), and the batched kernels compute each member as if alone, so each member's
numbers are its own run's bit for bit. Runs join a pack when they differ only in seed and
float knobs (α, T, β, lr, ema decay, ...): :func:`pack_key` is everything else — the student
class and its init_args, the variant's methods, integer and other knobs that set shapes or
choices (``adapter_hidden``), days, data, stores, codes, checkpoint, lag and world. A run with
a tracker, on an accelerator, or that cannot be stacked even in a pack of one trains through
Lightning (:func:`~gemkd.experiments.run.jobs.execute`); pack size 1 runs each run as a pack of
one.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from gemkd.experiments.run.jobs import StudentRun, execute, peak_rss_mb

log = logging.getLogger(__name__)

#: Runs per pack unless ``--pack-size`` says otherwise (1: each run alone, as before packs).
DEFAULT_PACK_SIZE = 16
#: Packs vmap their members' steps (a run alone: a batched pack of one); False: each member's
#: own ops, Lightning's run alone (see :func:`execute_pack`).
BATCHED = True


def _shape_params(params: dict[str, Any]) -> tuple:
    """The knobs that are not floats (widths, choices): members of a pack share them."""
    return tuple(sorted((k, repr(v)) for k, v in params.items() if type(v) is not float))


def pack_key(run: StudentRun) -> tuple | None:
    """What the members of a pack share; None: the run always runs alone."""
    spec = run.spec
    if run.tracker is not None or spec.accelerator != "cpu":
        return None
    # the spec less the knobs a member may set for itself (valid placeholders: replace checks)
    shared = dataclasses.replace(spec, lr=1.0, ema_decay=None if spec.ema_decay is None
                                 else 0.5)
    return (repr(shared), run.phase == "final", run.variant, _shape_params(run.params),
            tuple(run.train_days), tuple(run.eval_days), run.trained_until_day, run.data,
            tuple(sorted(run.stores.items())), tuple(sorted(run.base_rates.items())),
            run.codes, run.ckpt, run.lag, run.world)


def group_packs(runs: list[StudentRun], size: int) -> list[list[StudentRun]]:
    """``runs`` in packs of at most ``size`` members with one :func:`pack_key`, in the order
    of their first run (size 1: each run alone, in order)."""
    if size < 1:
        raise ValueError(f"pack size must be >= 1, got {size}")
    if size == 1:
        return [[r] for r in runs]
    packs: list[list[StudentRun]] = []
    open_: dict[tuple, list[StudentRun]] = {}
    for r in runs:
        key = pack_key(r)
        if key is None:
            packs.append([r])
            continue
        pack = open_.get(key)
        if pack is None or len(pack) >= size:
            pack = open_[key] = []
            packs.append(pack)
        pack.append(r)
    return packs


def execute_pack(runs: list[StudentRun], batched: bool = BATCHED) -> list[dict[str, Any]]:
    """Train and evaluate ``runs`` (one pack) in one pass; one ``runs.jsonl`` record per run,
    in order, each as :func:`~gemkd.experiments.run.jobs.execute` makes it (its seconds are
    the pack's divided among its members).

    ``batched`` (the default): the members' steps vmapped (see
    :mod:`gemkd.transfer.packs.pack`), and a run alone is a batched pack of one, so each
    member's numbers are its run alone's bit for bit; a batched pack that cannot be stacked
    trains each member as a pack of one. Exact (``batched=False``): each member's own ops, as
    Lightning's run alone (:func:`execute`), which a pack of one is then. A run with a tracker
    or on an accelerator (:func:`pack_key` None), or one that cannot be stacked even alone,
    runs through Lightning (:func:`execute`); a log line says why."""
    if len(runs) == 1 and not batched:
        return [execute(runs[0])]
    if any(pack_key(r) is None for r in runs):
        log.info("%d %s run(s) train alone through Lightning: a tracker or a non-cpu "
                 "accelerator", len(runs), runs[0].variant)
        return [execute(r) for r in runs]
    from gemkd.transfer.packs.pack import PackError

    try:
        return _train_pack(runs, batched)
    except PackError as e:
        if len(runs) > 1 and batched:
            log.warning("pack of %d %s runs trains each as a pack of one: %s", len(runs),
                        runs[0].variant, e)
            return [rec for r in runs for rec in execute_pack([r], batched)]
        log.warning("%s %s run%s trains %s through Lightning: %s",
                    "a" if len(runs) == 1 else f"pack of {len(runs)}", runs[0].variant,
                    "" if len(runs) == 1 else "s", "alone" if len(runs) == 1 else
                    "them one by one", e)
    return [execute(r) for r in runs]


def run_alone(run: StudentRun) -> dict[str, Any]:
    """One run's ``runs.jsonl`` record: a pack of one (:func:`execute_pack`)."""
    return execute_pack([run])[0]


def _train_pack(runs: list[StudentRun], batched: bool = False) -> list[dict[str, Any]]:
    import lightning.pytorch as pl

    from gemkd.experiments.run.jobs import _inputs
    from gemkd.experiments.run.kept_students import save_student
    from gemkd.experiments.run.student import StudentJob, build_module, student_datamodule
    from gemkd.experiments.run.train_knobs import with_train_knobs
    from gemkd.transfer.data.schema import day_range
    from gemkd.transfer.io import fs
    from gemkd.transfer.metrics.clusters import ClusterLoss
    from gemkd.transfer.packs.pack import PackedDistill, PackError

    t0 = time.perf_counter()
    first = runs[0]
    data = fs.as_where(first.data)
    modules, decays, specs = [], [], []
    for r in runs:  # each member built as its run builds it: seeded, then built
        spec = with_train_knobs(r.spec, r.params)
        job = StudentJob(spec.variant(r.variant), dict(r.params), r.seed, day_range(r.train_days),
                         day_range(r.eval_days), r.trained_until_day, r.perturb)
        pl.seed_everything(r.seed, verbose=False)
        module, _ = build_module(spec, job, data, _inputs(r), dict(r.base_rates))
        modules.append(module)
        decays.append(spec.ema_decay)
        specs.append((spec, job))
    pack = PackedDistill(modules, decays, batched=batched)
    spec, job = specs[0]
    dm = student_datamodule(spec, job, data, modules[0].model)
    t1 = time.perf_counter()
    batches = iter(dm.train_dataloader())
    steps = []
    examples = 0
    for i, batch in enumerate(batches):
        try:
            steps.append(pack.train_step(batch))
        except PackError:
            raise
        except Exception as e:  # an op the pack cannot run for these members
            if i == 0:
                raise PackError(f"its first step failed ({type(e).__name__}: {e})") from e
            raise
        examples += len(batch)
    pack.use_average()
    train_seconds = time.perf_counter() - t1
    t2 = time.perf_counter()
    sums = [ClusterLoss(len(spec.student_tasks)) if r.clusters else None for r in runs]
    if batched:
        _evaluate_at_once(pack, modules, sums, dm.test_dataloader())
    else:  # each batch as Lightning's test loop adds it: the metrics' float64 sums bit for bit
        for batch in dm.test_dataloader():
            logits = pack.serving_logits(batch)
            for k, (m, s) in enumerate(zip(modules, sums, strict=True)):
                mask = m.label_mask(batch)
                m.test_metrics.update(logits[k].float(), batch.labels, batch.domain, mask)
                if s is not None:
                    s.update(logits[k].detach().float(), batch.labels, batch.user_id,
                             batch.domain, mask)
    eval_seconds = time.perf_counter() - t2
    # a store teacher counts its coverage (the teacher is typed as any callable)
    coverage = getattr(pack.teacher, "coverage", float("nan"))
    out = []
    k_runs = len(runs)
    share = (time.perf_counter() - t0) / k_runs
    for k, (r, m, s) in enumerate(zip(runs, modules, sums, strict=True)):
        metrics = m.test_metrics.compute()
        m.test_metrics.reset()
        if s is not None and r.clusters is not None:  # one comes with the other
            s.save(Path(r.clusters), list(spec.student_tasks), list(m.domains),
                   dict(r.base_rates))
        if r.student is not None:  # the member's evaluated weights (its average in place)
            save_student(r, pack.member(k), metrics)
        if r.curve:
            _write_curve(Path(r.curve), [(i + 1, float(x[k])) for i, x in enumerate(steps)])
        own = train_seconds / k_runs
        out.append({"metrics": metrics, "train_seconds": own,
                    "eval_seconds": eval_seconds / k_runs,
                    "examples_per_second": examples / own if own else float("nan"),
                    "coverage": coverage, "run_seconds": share, "max_rss_mb": peak_rss_mb()})
    return out


def _evaluate_at_once(pack: Any, modules: list[Any], sums: list[Any], batches: Any) -> None:
    """Every member's evaluation logits over all of ``batches``, then one metrics update (and
    one per-user sums update) per member: K updates, not K per batch (a batched pack's
    members and its pack of one alike, so each member's numbers are its run alone's)."""
    import torch

    logits, labels, domain, user, masks = [], [], [], [], []
    for batch in batches:
        logits.append(pack.serving_logits(batch).float())
        labels.append(batch.labels)
        domain.append(batch.domain)
        user.append(batch.user_id)
        masks.append(modules[0].label_mask(batch))  # the batch's and the spec's: every member's
    if not logits:
        return
    every = torch.cat(logits, dim=1)
    y, d, u = torch.cat(labels), torch.cat(domain), torch.cat(user)
    mask = None if all(m is None for m in masks) else torch.cat(
        [torch.ones_like(b, dtype=torch.bool) if m is None else m
         for m, b in zip(masks, labels, strict=True)])
    for k, (m, s) in enumerate(zip(modules, sums, strict=True)):
        m.test_metrics.update(every[k], y, d, mask)
        if s is not None:
            s.update(every[k], y, u, d, mask)


def _write_curve(path: Path, rows: list[tuple[int, float]]) -> None:
    """The training-loss CSV a run writes (``step,train_loss``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "train_loss"])
        w.writerows(rows)

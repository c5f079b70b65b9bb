"""Students per second of packs (``gemkd.experiments.run.packs``) against one run per pass.

A pack trains K runs of one variant in one pass over the stream; this measures, side by side in
one process (interleaved rounds, medians), the whole labels-only student run — build, training
epoch, evaluation — of the quickstart's student (mlp [64, 32], batch 256, EMA 0.98) alone
(``execute``, Lightning's loop) and in packs of K (``execute_pack``), on a synthetic world:
students per second at each K and its ratio to one run per pass, and the floor: a pack of one
member's epoch (``PackedDistill`` with K = 1) against ``benchmarks/bare.py``'s bare loop.

    python -m benchmarks.bench_packs --threads 1 --json perf/packs.json
    python -m benchmarks.bench_packs --quick   # tiny world, K up to 4: a smoke run

Exact packs (each member's own ops, as Lightning's run alone; up to K = 16) and batched ones
(the default: the student stacked, the methods vmapped, a run alone being a batched pack of one)
are both timed against one Lightning run per pass; ``--vmap`` also times each batched pack with
the student's registered stacked forward switched off, so ``torch.func.vmap`` runs its
``forward`` (what a user's student without one gets): whether the hand-stacked forwards pay;
``--forwards N`` times, for each built-in student (mlp, dcn, seq_pool) and each pack size, N
training steps of a batched pack (batches in memory, labels-only) with the student's registered
stacked forward against ``torch.func.vmap`` over ``functional_call`` of its one ``forward``
(``forwards_<student><K>`` figures; docs/notes/2026-12-06-one-forward.md);
``--adapter-pack`` K times the kd_aux_adapter variant against labels-only, each in a batched
pack of K, after building a tiny teacher's store.
The floor's bare loop keeps the recipe's weight average, as the packs do.

Target (reported, not asserted): >= 6x students/s at K=16 for the quickstart's student phase.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    interleaved_times,
    print_figures,
    quiet_lightning,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["click", "conversion"]
#: exact packs (each member its own modules: K Lightning-equivalent runs a round) are timed up
#: to this size; the batched ones at every size
EXACT_UP_TO = 16


def _world(preset: str, out: Path) -> Path:
    from gemkd.transfer.config import load_dataclass
    from gemkd.transfer.data.synth import SynthConfig, generate

    generate(load_dataclass(SynthConfig, ROOT / "experiments" / "data" / f"{preset}.yaml"), out)
    return out


def _runs(data: Path, days: tuple[int, int], eval_days: tuple[int, int], k: int,
          table_optimizer: str = "dense_adamw"):
    from gemkd.experiments.run.jobs import StudentRun
    from gemkd.experiments.spec.load import spec_from_mapping
    from gemkd.transfer.training import training_base_rates

    spec = spec_from_mapping({
        "name": "bench_packs", "seeds": [0], "data": {"source": "synthetic"},
        "teacher_days": days[0], "student_days": list(days), "eval_days": list(eval_days),
        "student": {"class_path": "mlp", "init_args": {"embedding_dim": 8, "max_seq_len": 20,
                                                       "hidden": [64, 32]}},
        "student_tasks": TASKS, "variants": ["baseline"], "batch_size": 256, "lr": 0.01,
        "ema_decay": 0.98, "table_optimizer": table_optimizer})
    rates = training_base_rates(data, days=days, tasks=TASKS)
    return [StudentRun(key=f"b{s}", phase="tune", spec=spec, variant="baseline",
                       params={"lr": 0.01 * (1 + 0.1 * s), "ema_decay": 0.98}, seed=s, lag=0,
                       world=0, train_days=days, eval_days=eval_days, trained_until_day=days[0] - 1,
                       data=str(data), stores={}, base_rates=dict(rates)) for s in range(k)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--sizes", default=None, help="pack sizes, comma-separated "
                   "(default 1,4,16,64; --quick 1,4)")
    p.add_argument("--adapter-pack", type=int, default=16, help="members of the packs that time "
                   "kd_aux_adapter against labels-only (0: skip; a tiny teacher's store is built)")
    p.add_argument("--table-optimizers", default="dense_adamw",
                   help="the students' table optimisers, comma-separated: each other than "
                        "dense_adamw adds batched packs of each size with it (named "
                        "batched<K>_<optimiser>), timed in the same rounds")
    p.add_argument("--vmap", action="store_true", help="also time every batched pack with the "
                   "student under torch.func.vmap instead of its stacked forward (vmap<K>)")
    p.add_argument("--forwards", type=int, default=0, help="training steps of the per-student "
                   "timing of vmap against the stacked forward (0: skip; see the module doc)")
    p.add_argument("--only-forwards", action="store_true", help="time only --forwards")
    args = p.parse_args(argv)
    apply_common_args(p, args)
    quiet_lightning()
    from gemkd.experiments.run.jobs import execute
    from gemkd.experiments.run.packs import execute_pack

    sizes = [int(s) for s in (args.sizes or ("1,4" if args.quick else "1,4,16,64")).split(",")]
    preset, days, eval_days = ("tiny", (1, 5), (5, 6)) if args.quick else ("small", (1, 12),
                                                                           (12, 14))
    with tempfile.TemporaryDirectory() as tmp:
        data = _world(preset, Path(tmp) / "data")
        if args.forwards:
            forwards = _forward_figures(data, days, eval_days, sizes, args.forwards,
                                        args.repeats)
            if args.only_forwards:
                print(f"bench_packs --forwards {args.forwards} on the {preset} world, "
                      f"repeats {args.repeats}:")
                print_figures(forwards)
                write_json(args.json, {"quick": args.quick, "figures": forwards})
                return 0
        base = _runs(data, days, eval_days, max(sizes))
        fns: dict[str, Callable[[], object]] = {"alone": functools.partial(execute, base[0])}
        for k in sizes:
            if 1 < k <= EXACT_UP_TO:
                fns[f"pack{k}"] = functools.partial(execute_pack, base[:k], batched=False)
            fns[f"batched{k}"] = functools.partial(execute_pack, base[:k], batched=True)
            if args.vmap:
                fns[f"vmap{k}"] = _under_vmap(functools.partial(execute_pack, base[:k],
                                                                batched=True))
        rules = [r for r in args.table_optimizers.split(",") if r != "dense_adamw"]
        for rule in rules:
            runs = _runs(data, days, eval_days, max(sizes), rule)
            for k in sizes:
                fns[f"batched{k}_{rule}"] = functools.partial(execute_pack, runs[:k],
                                                              batched=True)
        t0 = time.perf_counter()
        times = interleaved_times(fns, repeats=args.repeats, warmup=1, rotate=True)
        med = {name: statistics.median(v) for name, v in times.items()}
        floor = _floor(base[0], args.repeats)
        adapter = (_adapter_cost(preset, days, eval_days, args.adapter_pack, args.repeats,
                                 args.threads or 1, Path(tmp)) if args.adapter_pack else None)
        print(f"(measured in {time.perf_counter() - t0:.0f} s)")
    alone = 1 / med["alone"]
    figures = forwards if args.forwards else []
    figures += [figure("pack: one run alone, students/s", alone, "students/s",
                      note="execute: build, Lightning epoch, evaluation")]
    for k in sizes:
        for mode, name in (("exact", f"pack{k}"), ("batched", f"batched{k}")):
            if name not in med:
                continue
            rate = k / med[name]
            figures.append(figure(f"pack {mode}: K={k}, students/s", rate, "students/s"))
            figures.append(figure(f"pack {mode}: K={k} / one run per pass", rate / alone, "x",
                                  target=">= 6" if k == 16 and mode == "batched" else None))
        if f"vmap{k}" in med:
            figures.append(figure(f"pack batched: K={k}, vmap / stacked forward seconds",
                                  med[f"vmap{k}"] / med[f"batched{k}"], "x",
                                  note="the student under torch.func.vmap against its "
                                       "hand-stacked forward, methods stacked in both"))
        for rule in rules:
            rate = k / med[f"batched{k}_{rule}"]
            figures.append(figure(f"pack batched {rule}: K={k} / one run per pass",
                                  rate / alone, "x", note="tables updated row-wise"))
            figures.append(figure(f"pack batched {rule}: K={k} / dense_adamw",
                                  med[f"batched{k}"] / med[f"batched{k}_{rule}"], "x"))
    for mode, value in floor.items():
        figures.append(figure(f"pack floor ({mode}): bare loop epoch / K=1 pack epoch", value,
                              "x", target=">= 0.85" if mode == "batched" else None,
                              note="both with the recipe's weight average (EMA 0.98); batched "
                                   "is how a sweep runs a run alone"))
    if adapter is not None:
        figures.append(figure(f"pack: kd_aux_adapter / labels-only seconds per member, "
                              f"batched K={args.adapter_pack}", adapter, "x",
                              target="<= 1.15" if args.adapter_pack == 16 else None,
                              note="the adapter's per-member cost inside a pack (teacher store "
                                   "of a tiny teacher; the same student)"))
    print(f"bench_packs on the {preset} world, days {days}, repeats {args.repeats}:")
    print_figures(figures)
    write_json(args.json, {"quick": args.quick, "figures": figures,
                           "seconds": {k: v for k, v in med.items()}})
    return 0


#: the built-in students at the quickstart's sizes (embedding 8, 20 events, hidden [64, 32])
FORWARD_STUDENTS: dict[str, dict[str, object]] = {
    "mlp": {"hidden": [64, 32]},
    "dcn": {"hidden": [64, 32], "n_cross": 2},
    "seq_pool": {"hidden": [64, 32]},
}


def _forward_figures(data: Path, days: tuple[int, int], eval_days: tuple[int, int],
                     sizes: list[int], steps: int, repeats: int) -> list[dict]:
    """For each built-in student and pack size K: median seconds of ``steps`` training steps
    of a batched pack of K labels-only members under vmap over those through the student's
    stacked forward (one interleaved run over the same in-memory batches; each candidate is
    built once and trains on across rounds)."""
    import dataclasses

    from gemkd.experiments.run.student import StudentJob, student_datamodule
    from gemkd.experiments.spec.load import spec_from_mapping
    from gemkd.transfer.io import fs
    from gemkd.transfer.packs.pack import PackedDistill

    base = _runs(data, days, eval_days, max(sizes))
    runs = {}
    for name, init in FORWARD_STUDENTS.items():
        spec = spec_from_mapping({
            "name": "bench_forwards", "seeds": [0], "data": {"source": "synthetic"},
            "teacher_days": days[0], "student_days": list(days), "eval_days": list(eval_days),
            "student": {"class_path": name, "init_args": {"embedding_dim": 8, "max_seq_len": 20,
                                                          **init}},
            "student_tasks": TASKS, "variants": ["baseline"], "batch_size": 256, "lr": 0.01,
            "ema_decay": 0.98})
        runs[name] = [dataclasses.replace(r, spec=spec) for r in base]
    r = runs["mlp"][0]
    job = StudentJob(r.spec.variant("baseline"), dict(r.params), r.seed, r.train_days,
                     r.eval_days, r.trained_until_day)
    dm = student_datamodule(r.spec, job, fs.as_where(r.data), _modules(runs["mlp"], 1)[0].model)
    batches = [b for _, b in zip(range(steps), dm.train_dataloader(), strict=False)]

    def steps_of(members: list, vmapped: bool) -> Callable[[], object]:
        pack = PackedDistill(members, [0.98] * len(members), batched=True)
        if vmapped:
            _vmap_student(pack)
        assert (pack._stacked is None) == vmapped

        def fit() -> None:
            for batch in batches:
                pack.train_step(batch)
        return fit

    fns: dict[str, Callable[[], object]] = {}
    for name in FORWARD_STUDENTS:
        for k in sizes:
            fns[f"{name}{k}_stacked"] = steps_of(_modules(runs[name], k), False)
            fns[f"{name}{k}_vmap"] = steps_of(_modules(runs[name], k), True)
    times = interleaved_times(fns, repeats=repeats, warmup=1, rotate=True)
    med = {n: statistics.median(v) for n, v in times.items()}
    out = []
    for name in FORWARD_STUDENTS:
        for k in sizes:
            out.append(figure(f"forwards {name}: K={k}, vmap / stacked seconds",
                              med[f"{name}{k}_vmap"] / med[f"{name}{k}_stacked"], "x",
                              note=f"{len(batches)} training steps of a batched pack, batch "
                                   f"256, labels-only; stacked "
                                   f"{med[f'{name}{k}_stacked']:.2f} s"))
    return out


def _modules(runs: list, k: int) -> list:
    """The first ``k`` runs' training modules, each built (seeded) as its run builds it."""
    import lightning.pytorch as pl

    from gemkd.experiments.run.jobs import _inputs
    from gemkd.experiments.run.student import StudentJob, build_module
    from gemkd.transfer.io import fs

    modules = []
    for r in runs[:k]:
        job = StudentJob(r.spec.variant("baseline"), dict(r.params), r.seed, r.train_days,
                         r.eval_days, r.trained_until_day)
        pl.seed_everything(r.seed, verbose=False)
        module, _ = build_module(r.spec, job, fs.as_where(r.data), _inputs(r), dict(r.base_rates))
        modules.append(module)
    return modules


def _vmap_student(pack: Any) -> None:
    """Switch a built batched pack to vmap over ``functional_call`` of the student's forward
    (what a student without a stacked forward gets)."""
    pack._stacked, pack._student, pack._shared_features = None, {}, False
    pack._stacked_step = False


def _under_vmap(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with every student's stacked forward ignored: the pack vmaps its forward."""
    from unittest import mock

    def call() -> object:
        with mock.patch("gemkd.transfer.packs.pack.stacked_forward", lambda student: None):
            return fn()
    return call


def _adapter_cost(preset: str, days: tuple[int, int], eval_days: tuple[int, int], k: int,
                  repeats: int, threads: int, tmp: Path) -> float:
    """Median seconds of a batched pack of ``k`` kd_aux_adapter runs over those of ``k``
    labels-only runs: a ``gemkd run`` of both variants (a tiny teacher, one trial, pack size 1)
    builds the teacher's store; its final runs, reseeded, make the packs."""
    import dataclasses

    import yaml

    from gemkd.experiments.cli import main
    from gemkd.experiments.run import executors
    from gemkd.experiments.run.packs import execute_pack

    spec = {
        "name": "bench_packs_adapter", "seeds": [0], "data": {"source": "synthetic",
                                                              "preset": preset},
        "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 30}},
        "teacher_days": days[0], "student_days": list(days), "eval_days": list(eval_days),
        "teacher_lag_days": 0, "student_tasks": TASKS, "variants": ["baseline", "kd_aux_adapter"],
        "student": {"class_path": "mlp", "init_args": {"embedding_dim": 8, "max_seq_len": 20,
                                                       "hidden": [64, 32]}},
        "batch_size": 256, "lr": 0.01, "ema_decay": 0.98, "tuning": {"trials": 1}}
    (tmp / "adapter.yaml").write_text(yaml.safe_dump(spec))
    seen: list = []
    original = executors.Serial.run

    def record(self, runs, done) -> None:
        seen.extend(runs)
        original(self, runs, done)

    executors.Serial.run = record  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the sweep's report: not a figure
            assert main(["run", str(tmp / "adapter.yaml"), "--out", str(tmp / "adapter"),
                         "--threads", str(threads), "--workers", "1", "--pack-size", "1"]) == 0
    finally:
        executors.Serial.run = original  # type: ignore[method-assign]
    final = {r.variant: r for r in seen if r.phase == "final"}
    packs = {v: [dataclasses.replace(r, key=f"{v}{s}", seed=s, curve=None, clusters=None)
                 for s in range(k)] for v, r in final.items()}
    t = interleaved_times({v: functools.partial(execute_pack, packs[v]) for v in packs},
                          repeats=repeats, warmup=1, rotate=True)
    return statistics.median(t["kd_aux_adapter"]) / statistics.median(t["baseline"])


def _floor(run, repeats: int) -> dict[str, float]:
    """Median epoch seconds of ``bare.py``'s loop (with the recipe's weight average) over
    those of a pack of one member, exact and batched."""
    import lightning.pytorch as pl

    from benchmarks.bare import bare_loop
    from gemkd.experiments.run.jobs import _inputs
    from gemkd.experiments.run.student import StudentJob, build_module
    from gemkd.transfer.io import fs
    from gemkd.transfer.packs.pack import PackedDistill

    data = fs.as_where(run.data)
    job = StudentJob(run.spec.variant("baseline"), dict(run.params), run.seed, run.train_days,
                     run.eval_days, run.trained_until_day)
    loop = bare_loop(run.spec, job, data, _inputs(run), dict(run.base_rates))
    batches = list(loop.datamodule.train_dataloader())  # in memory: the loops alone are timed

    def bare() -> None:
        bare_loop(run.spec, job, data, _inputs(run), dict(run.base_rates), ema=True
                  ).run(batches)

    def pack(batched: bool) -> None:
        pl.seed_everything(run.seed, verbose=False)
        module, _ = build_module(run.spec, job, data, _inputs(run), dict(run.base_rates))
        PackedDistill([module], [run.spec.ema_decay], batched=batched).fit(batches)

    t = interleaved_times({"bare": bare, "exact": lambda: pack(False),
                           "batched": lambda: pack(True)}, repeats=repeats, warmup=1)
    return {mode: statistics.median(t["bare"]) / statistics.median(t[mode])
            for mode in ("exact", "batched")}


if __name__ == "__main__":
    raise SystemExit(main())

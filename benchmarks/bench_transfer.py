"""KD overhead: one student epoch per `gemkd run` variant, side by side; input-pipeline headroom.

    python -m benchmarks.bench_transfer [--json OUT] [--quick] [--threads 1] [--device cpu|cuda]

Why: knowledge transfer is only worth shipping if it costs the student little. Each variant's
epoch is run through ``gemkd.experiments.run.student.train_student`` exactly as ``gemkd run`` runs
it (the variants' methods, ``DistillModule``, ``StoreTeacher``/``TeacherJoin``, ``AsOfCodes`` =
as-of code lookup + mean pooling), with the quickstart spec's student (``mlp``), tasks, domain,
batch size and learning rate, over the quickstart's student days of the small world (``--quick``:
the tiny world at 3x its impressions, days 3-4). The figure is the training epoch: wall time from
the epoch's start to its last training batch (data loading included), read by a callback passed to
``train_student``. ``train_student``'s own ``train_seconds`` (all of ``trainer.fit``, Lightning's
start-up included) is recorded too; the test pass after ``fit`` is not timed.

The store, the codes and the data come from the run's own cached steps
(``gemkd.experiments.run``: ``cached_fit`` / ``cached_export`` / ``build_codes``) in a
temporary directory; to keep that cheap the teacher is the tiny GEM trained for ``--teacher-steps``
steps and the compressor trains for one epoch. Neither changes the timed path (same join, loss and
lookups).

Targets, read cumulatively, ratio to the labels-only epoch (``baseline``): ``kd`` (+
store join + KD loss) <= 1.15x; ``kd_aux_adapter`` (+ Student Adapter, with the auxiliary head the
run's adapter variant has) <= 1.25x; ``full`` (KD, the aux head and representation features: the
spec's ``full``, without the adapter) <= 1.5x. ``kd_aux`` and ``kd_repr`` are shown for
attribution. Input pipeline: the loader ``train_student`` trains from (projected to the student's
columns and ``max_seq_len``, with the decoded row groups kept in the process as
``gemkd.experiments.run.student`` builds it) delivers >= 5x the labels-only training rate, so
training is never input-bound; the same loader decoding every pass (a process's first student) and
a loader of every column are shown too. A student run as a sweep's worker runs it
(``train_student``: build the student and its methods, fit, evaluate, with the lag's store and
codes already open) costs <= 2x its training epoch + evaluation.

The floor: two bare PyTorch loops (``benchmarks.bare``) run as candidates in the
same rounds: the labels-only student (same seed, student, losses through ``RankingModule.loss``,
the optimiser and groups of ``configure_optimizers``, batch order) over the epoch's batches held in
memory, and over the same loader ``train_student`` reads (prefetch included; its clock starts at
``iter(loader)``, as Lightning's epoch does). Target: the labels-only epoch reaches >= 0.8x the
in-memory loop's speed. Before timing, one untimed ``train_student`` labels-only run and one
in-memory loop are compared: per-step losses and final raw (not averaged) weights must be
bit-identical (the figure is the largest absolute difference; 0 = identical). The Student
Adapter's overhead is shown for its default fused update and for ``update: separate``
(``*_separate`` variants; no target: fused is the default).

Every candidate (variants, bare loops and loader passes) runs once per round, ``--repeats``
rounds (default 15) after a warm-up round. Times are medians over rounds; every ratio of two
candidates is the median of the rounds' own ratios (the two ran seconds apart, at the same
machine speed), with their interquartile range beside it (how much two runs can differ).
``--device cuda`` sets the spec's ``accelerator: gpu`` and synchronises after each batch; a
variant that fails is reported with its error, not dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch

from benchmarks.bare import RawCapture, bare_loop, compare
from benchmarks.common import (
    add_common_args,
    apply_common_args,
    interleaved_times,
    median_seconds,
    print_figures,
    sync,
    write_json,
)
from benchmarks.transfer_figures import SEPARATE, figures
from gemkd.experiments.run.codes_step import build_codes
from gemkd.experiments.run.data_sources import prepare_data
from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.run.student import (
    Inputs,
    StudentJob,
    student_projection,
    train_student,
)
from gemkd.experiments.run.teacher_steps import (
    cached_export,
    cached_fit,
    teacher_config,
)
from gemkd.experiments.spec import PluginSpec, RunSpec, TeacherSpec, VariantSpec, load_spec
from gemkd.students import build_student
from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.data.schema import DatasetSchema, day_range
from gemkd.transfer.distill import StoreTeacher
from gemkd.transfer.repr_features import AsOfCodes, CodeStore
from gemkd.transfer.store import TeacherStore
from gemkd.transfer.teacher_fit_dir import TeacherFitDir
from gemkd.transfer.training import training_base_rates

VARIANTS = ["baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr", "full",
            "kd_aux_adapter" + SEPARATE]
BARE = ["bare_memory", "bare_loader"]
# tiny world at 3x its impressions: a student epoch of ~10k examples, long enough to time
QUICK_SETS = ["data.preset=tiny", "data.overrides.examples_per_day=12000", "teacher_days=3",
              "student_days=[3,5]", "eval_days=[5,6]"]


def spec_for(quick: bool) -> RunSpec:
    """The quickstart spec; eval shortened to one day (it is not timed, only paid for)."""
    spec = load_spec(None, QUICK_SETS if quick else [])
    spec.eval_days = [spec.eval_days[0], spec.eval_days[0] + 1]
    return spec


def variant_spec(spec: RunSpec, name: str) -> VariantSpec:
    """The spec's variant, or for ``<variant>_separate`` that variant with the adapter's
    ``update: separate``."""
    if not name.endswith(SEPARATE):
        return spec.variant(name)
    base = spec.variant(name.removesuffix(SEPARATE))
    methods = [PluginSpec(m.class_path, {**m.init_args, "update": "separate"})
               if m.class_path == "adapter" else m for m in base.methods]
    return dataclasses.replace(base, name=name, methods=methods)


def build_inputs(spec: RunSpec, cache: Path, teacher_steps: int) -> tuple[Path, Path, Path]:
    """Data, teacher store and code store through the run's own cached steps."""
    def log(msg: str) -> None:
        print(f"  [setup] {msg}", flush=True)

    data, data_key = prepare_data(spec, cache, log)
    which = TeacherSpec("tiny", overrides={"max_seq_len": spec.teacher.overrides.get("max_seq_len"),
                                           "max_steps": teacher_steps, "log_every_n_steps": 1})
    run = cached_fit(teacher_config(spec, 0, which, plan_run(spec).val_days), data, data_key,
                     cache, log)
    store = cached_export(TeacherFitDir(run).best_or_last(), data, spec.repr.layer or "trunk",
                          cache, log)
    codes = build_codes(store, spec.teacher_window(0),
                              dataclasses.replace(spec.repr, epochs=1), spec.seeds[0], cache, log)
    return data, store, codes


class TrainClock(pl.Callback):
    """Wall time from the training epoch's start to the end of its last training batch: the
    epoch without the validation pass Lightning runs after it."""

    def __init__(self, device: str) -> None:
        self.device, self.t0, self.last, self.batches = device, 0.0, 0.0, 0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        sync(self.device)
        self.t0 = self.last = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        sync(self.device)
        self.last = time.perf_counter()
        self.batches += 1

    @property
    def seconds(self) -> float:
        return self.last - self.t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, device=True)
    # an epoch is ~0.2 s and this machine's speed drifts by up to 2x within seconds: the
    # per-round ratios spread +-0.15, so 15 rounds (~1 min), not the scripts' default 5
    p.set_defaults(repeats=ROUNDS)
    p.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    p.add_argument("--teacher-steps", type=int, default=20)
    args = p.parse_args()
    apply_common_args(p, args)
    if args.variants[0] != "baseline":
        p.error("--variants must start with baseline (the denominator)")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    t_start = time.perf_counter()
    spec = spec_for(args.quick)
    if args.device != "cpu":
        spec.accelerator = "gpu"
    with tempfile.TemporaryDirectory(prefix="bench_transfer-") as tmp:
        data, store, codes_dir = build_inputs(spec, Path(tmp) / "cache", args.teacher_steps)
        setup_s = time.perf_counter() - t_start
        res = measure(spec, args, data, store, codes_dir)
    res["setup_seconds"] = round(setup_s, 1)
    res["total_seconds"] = round(time.perf_counter() - t_start, 1)
    figs = figures(res, args.device)
    print(f"transfer: {res['examples']:,} examples per epoch (domain {spec.student_domain}, days "
          f"{spec.student_days}), batch {spec.batch_size}, {res['threads']} threads, median of "
          f"{args.repeats} interleaved rounds after a warm-up; total {res['total_seconds']} s")
    print_figures(figs)
    write_json(args.json, {"bench": "transfer", "quick": args.quick, "device": args.device,
                           "repeats": args.repeats, **res, "figures": figs})


def measure(spec: RunSpec, args: argparse.Namespace, data: Path, store: Path,
            codes_dir: Path) -> dict:
    tasks = list(spec.student_tasks)
    only = [spec.student_domain] if spec.student_domain else None
    days = day_range(spec.student_days)
    base_rates = training_base_rates(data, days, tasks, only)
    inputs = Inputs({"gem": store}, AsOfCodes(CodeStore(codes_dir), spec.repr.max_events))
    params = {"kd_weight": 1.0, "temperature": 1.0, "aux_beta": 0.5, "adapter_hidden": 16}
    job = StudentJob(spec.variant("baseline"), params, spec.seeds[0], days,
                     day_range(spec.eval_days), spec.teacher_days - 1)
    epoch: dict[str, list[float]] = {v: [] for v in args.variants}
    fit: dict[str, list[float]] = {v: [] for v in args.variants}
    evals: dict[str, list[float]] = {v: [] for v in args.variants}
    errors: dict[str, str] = {}
    examples = {}

    def run_variant(variant: str):
        def run() -> None:
            if variant in errors:
                return
            try:
                clock = TrainClock(args.device)
                r = train_student(spec, dataclasses.replace(
                    job, variant=variant_spec(spec, variant)), data, inputs, base_rates,
                    callbacks=[clock])
            except Exception as e:  # noqa: BLE001 - report it, keep measuring the others
                errors[variant] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(f"  {variant}: FAILED {errors[variant]}", flush=True)
                return
            epoch[variant].append(clock.seconds)
            fit[variant].append(r["train_seconds"])
            evals[variant].append(r["eval_seconds"])
            examples[variant] = round(r["examples_per_second"] * r["train_seconds"])
        return run

    dm = AdsDataModule(data, train_days=days, batch_size=spec.batch_size, shuffle=False,
                       tasks=tasks, domains=only)
    schema = DatasetSchema.load(data)
    student = build_student({"class_path": spec.student.class_path,
                             "init_args": dict(spec.student.init_args)}, schema, tasks)
    projected = AdsDataModule(data, train_days=days, batch_size=spec.batch_size, shuffle=False,
                              tasks=tasks, domains=only, cache=True,
                              **student_projection(student))
    cold = AdsDataModule(data, train_days=days, batch_size=spec.batch_size, shuffle=False,
                         tasks=tasks, domains=only, **student_projection(student))
    rows: dict[str, int] = {}

    def read(name: str, module: AdsDataModule):
        def run() -> None:
            rows[name] = sum(len(b) for b in module.train_dataloader())
        return run

    held, floor = check_floor(spec, job, data, inputs, base_rates, args.device)
    bare: dict[str, list[float]] = {b: [] for b in BARE}

    def run_bare(name: str):
        def run() -> None:
            loop = bare_loop(spec, job, data, inputs, base_rates)
            loop.module.to(args.device)
            batches = held if name == "bare_memory" else loop.datamodule.train_dataloader()
            sync(args.device)
            t0 = time.perf_counter()
            loop.run(batches, args.device)
            sync(args.device)
            bare[name].append(time.perf_counter() - t0)
        return run

    fns = {v: run_variant(v) for v in args.variants}
    fns.update({b: run_bare(b) for b in BARE})
    fns["loader"] = read("loader", dm)
    fns["loader_projected"] = read("loader_projected", projected)
    fns["loader_decode"] = read("loader_decode", cold)
    # train_student measures its own epoch; the loop's times are the whole call (+ evaluation)
    wall = interleaved_times(fns, args.repeats, warmup=1, device=args.device, rotate=True)
    epoch = {v: t[1:] for v, t in epoch.items()}  # the first call of each is the warm-up
    fit = {v: t[1:] for v, t in fit.items()}
    evals = {v: t[1:] for v, t in evals.items()}
    bare = {b: t[1:] for b, t in bare.items()}
    med = {v: statistics.median(t) for v, t in epoch.items() if len(t) >= args.repeats}
    med_fit = {v: statistics.median(t) for v, t in fit.items() if len(t) >= args.repeats}
    setup = {
        "store_teacher_open_s": median_seconds(
            lambda: StoreTeacher(TeacherStore(store), tasks, policy="mask"), args.repeats),
        "code_features_open_s": median_seconds(
            lambda: AsOfCodes(CodeStore(codes_dir), spec.repr.max_events), args.repeats),
    }
    n = examples.get("baseline") or rows["loader"]
    return {
        "examples": n, "threads": torch.get_num_threads(), "variants": args.variants,
        "epoch_seconds": med, "epoch_seconds_all": epoch, "errors": errors,
        "fit_seconds": med_fit, "fit_seconds_all": fit,
        "eval_seconds": {v: statistics.median(t) for v, t in evals.items() if t},
        "call_seconds": {v: statistics.median(t) for v, t in wall.items()},
        "loader_seconds": statistics.median(wall["loader"]),
        "loader_projected_seconds": statistics.median(wall["loader_projected"]),
        "loader_decode_seconds": statistics.median(wall["loader_decode"]),
        "loader_rows": rows, **setup,
        "bare_seconds": {b: statistics.median(t) for b, t in bare.items()},
        "bare_seconds_all": bare, "floor_check": floor,
    }


def check_floor(spec: RunSpec, job: StudentJob, data: Path, inputs: Inputs,
                base_rates: dict[str, float], device: str) -> tuple[list, dict]:
    """The labels-only epoch's batches (held on ``device`` for the in-memory loop), and the
    comparison of one ``train_student`` labels-only run with one in-memory bare loop."""
    probe = bare_loop(spec, job, data, inputs, base_rates)
    held = [b.to(device) for b in probe.datamodule.train_dataloader()]
    capture = RawCapture()
    train_student(spec, job, data, inputs, base_rates, callbacks=[capture])
    probe.module.to(device)
    losses = probe.run(held, device)
    weights = {k: v.detach().clone() for k, v in probe.module.model.state_dict().items()}
    return held, compare(capture.losses, capture.weights, losses, weights)


#: timed rounds by default (--repeats): see main()
ROUNDS = 15


if __name__ == "__main__":
    main()

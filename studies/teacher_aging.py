"""Teacher aging on real logs: how fast does a teacher's NE rise with the age of its training
window? (docs/results/STALENESS.md)

    python -m studies.teacher_aging --data DATASET_DIR [--window 4] [--ages 0 2 4 6]
        [--eval-days 12 14] [--seeds 0 1 2] [--models gem mlp] [--set KEY=VALUE ...]
        [--groups all tab_0] [--task click] [--bootstrap 200] [--threads 1]
        [--json OUT] [--markdown OUT] [--plot OUT.png] [--keep DIR]

Every model is trained on a window of ``--window`` days that ends ``age`` days before the first
evaluation day — ``[E0 − age − W, E0 − age)`` — and all are evaluated on the same days
``[E0, E1)``: the windows have equal length and differ only in age (DESIGN §6.1). Each age is
trained for ``gem`` (the teacher config, default ``small``) and ``mlp`` (``mlp_small`` with the
teacher's feature keys and trainer settings, as in ``studies/teacher_ablation.py``) on the
same windows and seeds: the MLP is the control, so a teacher whose NE rises with age faster than
the MLP's has aged beyond "an older window is a worse window for any model".

Training is one fixed recipe for every window: ``max_epochs`` epochs (1 unless ``--set``), the
last kept, no validation days (any validation day would sit between the window and the
evaluation, or be an evaluation day). ``--set`` overrides trainer keys of both configs
(``max_seq_len=256``); ``model.KEY=V`` sets a GEM hyper-parameter (feature keys ``d``,
``max_history``… also reach the MLP), ``mlp.KEY=V`` an MLP one. With ``--keep DIR`` a finished
run of the same config and dataset is reused, so a rerun with other ``--ages`` or ``--groups``
only evaluates.

Reported per model × age × domain group × task: NE (mean ± std over seeds) with a 95 % interval
from a user-level (cluster) bootstrap of the evaluation rows combined with a bootstrap over seeds
(``gemkd.transfer.metrics.bootstrap``); AUC (mean ± std over seeds); calibration Σp / Σy with the
same interval. NE divides by the entropy of the *training window's* positive rate (the library's
convention; for a domain group, the window's rate on that domain's rows), so a window whose base
rate differs from the evaluation days' also moves NE: ``ne_eval`` (NE against the evaluation
rows' own rate, i.e. rescaled log loss) is reported beside it. The headline is the least-squares
slope of NE against age (NE per day of age) per model, its interval from the same replicates, and
the paired difference of slopes teacher − MLP.

This file trains the windows and runs the command; ``studies/aging_study.py`` holds
:func:`evaluate_rows` (a trained checkpoint → per-row outputs on the evaluation days) and
:func:`aging_study` / :func:`aging_curve` (rows of many checkpoints → the table and the slopes),
separate from training so any set of checkpoints (a streaming teacher's daily ones, a synthetic
world's) can be aged the same way; ``studies/aging_report.py`` the markdown and the plot.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import (
    add_common_args,
    apply_common_args,
    quiet_lightning,
    write_json,
)
from gemkd.experiments.teacher.teacher_config import (
    TEACHER_CONFIGS,
    TeacherTrainConfig,
    find_config,
    load_teacher_config,
)
from gemkd.transfer.teacher_fit_dir import TeacherFitDir
from studies.aging_report import markdown, plot
from studies.aging_study import (
    ALL,
    Run,
    aging_study,
    evaluate_rows,
    window_base_rates,
)
from studies.teacher_ablation import parse_overrides, variant_config

#: benchmark model name → teacher_ablation variant
MODELS = {"gem": "full", "mlp": "mlp", "gem_base": "full"}  # gem_base: GEM of --base-config
DEFAULT_MODELS = ["gem", "mlp"]


# ---- training the windows -----------------------------------------------------------------------

def build_configs(teacher_config: str, mlp_config: str, sets: list[str], accelerator: str,
                  base_config: str | None = None
                  ) -> tuple[TeacherTrainConfig, TeacherTrainConfig, TeacherTrainConfig | None]:
    """The teacher, MLP and (with ``base_config``) second GEM configs with ``--set`` applied
    (``model.K`` / ``mlp.K``: a model key of GEM / the MLP; trainer keys reach all three, the
    second GEM keeping its own model and recipe otherwise)."""
    values = parse_overrides(sets, "--set")
    gem_model = {k[6:]: v for k, v in values.items() if k.startswith("model.")}
    mlp_model = {k[4:]: v for k, v in values.items() if k.startswith("mlp.")}
    trainer = {"max_epochs": 1,  # one epoch was the best of 3 on both real logs (STALENESS.md)
               **{k: v for k, v in values.items() if not k.startswith(("model.", "mlp."))}}
    teacher = load_teacher_config(find_config(teacher_config, TEACHER_CONFIGS),
                                  {**trainer, "accelerator": accelerator})
    mlp = load_teacher_config(find_config(mlp_config, TEACHER_CONFIGS))
    teacher = dataclasses.replace(teacher, model={**teacher.model, **gem_model})
    mlp = dataclasses.replace(mlp, model={**mlp.model, **mlp_model})
    base = None if base_config is None else load_teacher_config(
        find_config(base_config, TEACHER_CONFIGS), {**trainer, "accelerator": accelerator})
    return teacher, mlp, base


def window(age: int, width: int, eval_first: int) -> tuple[int, int]:
    """``[E0 − age − W, E0 − age)``: the window of ``width`` days ending ``age`` days before
    the first evaluation day."""
    return eval_first - age - width, eval_first - age


def train_window(model: str, teacher: TeacherTrainConfig, mlp: TeacherTrainConfig,
                 days: tuple[int, int], seed: int, data: Path, out: Path,
                 base: TeacherTrainConfig | None = None) -> tuple[Path, bool]:
    """Fit ``model`` (gem | mlp) on ``days`` with ``seed``: the checkpoint of its last epoch, and
    whether it was reused — a finished run in ``out`` with the same resolved config on the same
    dataset (``--keep``: a rerun with other ages or groups only evaluates)."""
    from gemkd.experiments.teacher.teacher_fit import fit_teacher

    if model == "gem_base":
        if base is None:
            raise ValueError("model gem_base needs the second GEM config (--base-config)")
        teacher = base
    cfg = variant_config(MODELS[model], teacher, mlp, seed)
    cfg = dataclasses.replace(cfg, name=f"{model}-{days[0]}-{days[1]}-s{seed}",
                              train_days=list(days), val_days=None, test_days=None,
                              select="last", patience=None)
    run = TeacherFitDir(out)
    ckpt, marker = run.last, out / "aging_data.txt"
    if (ckpt.is_file() and marker.is_file() and marker.read_text() == str(data.resolve())
            and run.read_config() == yaml.safe_load(
                yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))):
        return ckpt, True
    marker.unlink(missing_ok=True)
    ckpt = Path(fit_teacher(cfg, data, out, progress=False)["checkpoint"])
    marker.write_text(str(data.resolve()))
    return ckpt, False


def resolve_data(pattern: str) -> Path | None:
    """A dataset directory, or the first match of a glob (a run's cache: ``data-*/data``)."""
    hits = sorted(glob.glob(pattern))
    for hit in hits:
        if (Path(hit) / "schema.json").is_file():
            return Path(hit)
    return None


def day_spans(data: Path, days: Iterable[int]) -> dict[int, tuple[str, str]]:
    """First and last timestamp (UTC) of each day: what a "day" of age is in calendar time."""
    import datetime

    import pyarrow.compute as pc

    from gemkd.transfer.data.dataset_writer import read_day

    out = {}
    for d in days:
        ts = read_day(data, d, ["ts"]).column("ts")
        lo, hi = pc.min(ts).as_py(), pc.max(ts).as_py()
        first, last = (datetime.datetime.fromtimestamp(v, datetime.UTC).strftime("%Y-%m-%d %H:%M")
                       for v in (lo, hi))
        out[d] = (first, last)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True,
                   help="a gemkd dataset directory (or a glob, e.g. runs/kuairand/cache/data-*/"
                        "data); absent: a message and exit 0")
    p.add_argument("--name", default="", help="a label for the titles (e.g. KuaiRand)")
    p.add_argument("--unit", default="day",
                   help="what one of the dataset's days is, for the labels (MovieLens: bucket)")
    p.add_argument("--window", type=int, default=4, help="days per training window")
    p.add_argument("--ages", type=int, nargs="+", default=[0, 2, 4, 6])
    p.add_argument("--eval-days", type=int, nargs=2, default=[12, 14], metavar=("FIRST", "END"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=DEFAULT_MODELS,
                   help="gem (--teacher-config), mlp (the control), gem_base (--base-config: "
                        "a second GEM size on the same windows)")
    p.add_argument("--base-config", default="base",
                   help="the GEM config of model gem_base (default: base)")
    p.add_argument("--control", default="mlp", choices=list(MODELS),
                   help="the model the others are compared with (slopes, and each age's "
                        "paired difference)")
    p.add_argument("--teacher-config", default="small")
    p.add_argument("--mlp-config", default="mlp_small")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="trainer keys of both configs (max_epochs=1, max_seq_len=256), "
                        "model.KEY / mlp.KEY for model hyper-parameters")
    p.add_argument("--groups", "--domains", nargs="+", default=[ALL], dest="groups",
                   help="domain groups to report: 'all' and/or domain names (the models train "
                        "on every domain; a domain's NE uses the window's rate on that domain)")
    p.add_argument("--task", default=None, help="the task of the markdown and plot "
                   "(default: the dataset's first); the JSON has every task")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap replicates")
    p.add_argument("--bootstrap-seed", type=int, default=0)
    p.add_argument("--accelerator", choices=["auto", "cpu", "gpu"], default="cpu")
    p.add_argument("--markdown", default=None)
    p.add_argument("--plot", default=None)
    p.add_argument("--keep", default=None, help="keep the runs under this directory")
    add_common_args(p)
    args = p.parse_args(argv)
    quiet_lightning()
    apply_common_args(p, args)  # --threads (--repeats: unused, nothing is timed here)
    if args.quick:  # a smoke run: one seed, few replicates (not reference figures)
        args.seeds, args.bootstrap = args.seeds[:1], min(args.bootstrap, 50)
    data = resolve_data(args.data)
    if data is None:
        print(f"skipped: no gemkd dataset at {args.data}")
        return None
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(data)
    first, end = args.eval_days
    wins = {a: window(a, args.window, first) for a in args.ages}
    bad = [a for a, (s, _) in wins.items() if s < min(schema.days)]
    if bad or end > max(schema.days) + 1 or first >= end:
        raise SystemExit(f"error: windows of ages {bad} or evaluation days {args.eval_days} do "
                         f"not fit the dataset's days {min(schema.days)}..{max(schema.days)}")
    unknown = [g for g in args.groups if g != ALL and g not in schema.domains]
    if unknown:
        raise SystemExit(f"error: --groups {unknown}: the dataset's domains are "
                         f"{', '.join(schema.domains)} (or 'all')")
    task = args.task or schema.tasks[0]
    teacher, mlp, base = build_configs(args.teacher_config, args.mlp_config, args.overrides,
                                       args.accelerator,
                                       args.base_config if "gem_base" in args.models else None)
    days_used = sorted({d for s, e in wins.values() for d in range(s, e)} | set(range(first, end)))
    out: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"}, "data": str(data),
        "windows": {str(a): list(w) for a, w in wins.items()}, "eval_days": [first, end],
        "day_spans_utc": {str(d): list(v) for d, v in day_spans(data, days_used).items()},
        "teacher": dataclasses.asdict(teacher), "mlp": dataclasses.asdict(mlp),
        "quick": args.quick,
    }
    print(f"data {data}: windows {wins}, evaluation days [{first}, {end})", flush=True)
    runs: list[Run] = []
    t_start = time.perf_counter()
    timings = []
    with tempfile.TemporaryDirectory(prefix="gemkd-aging-") as tmp:
        root = Path(args.keep or tmp)
        for age, days in wins.items():
            rates = window_base_rates(data, days, schema.tasks, args.groups)
            for seed in args.seeds:
                for model in args.models:
                    t0 = time.perf_counter()
                    ckpt, reused = train_window(model, teacher, mlp, days, seed, data,
                                                root / f"{model}-age{age}-s{seed}", base)
                    t1 = time.perf_counter()
                    rows = evaluate_rows(ckpt, data, (first, end))
                    runs.append(Run(model, age, seed, rows, rates))
                    t2 = time.perf_counter()
                    timings.append({"model": model, "age": age, "seed": seed, "reused": reused,
                                    "train_s": round(t1 - t0, 1), "eval_s": round(t2 - t1, 1)})
                    print(f"  {model} age {age} {list(days)} seed {seed}: "
                          f"{'reused' if reused else 'trained'} {t1 - t0:.0f} s, "
                          f"evaluated {t2 - t1:.0f} s", flush=True)
    curve, slopes, levels = aging_study(runs, groups=args.groups, samples=args.bootstrap,
                                        seed=args.bootstrap_seed, control=args.control,
                                        levels=True)
    out.update(curve=curve.to_dict("records"), slopes=slopes.to_dict("records"),
               levels=levels.to_dict("records"),
               timings=timings, seconds=round(time.perf_counter() - t_start, 1))
    write_json(args.json, out)
    text = markdown(curve, slopes, task, args.groups, unit=args.unit, levels=levels)
    print(text)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text + "\n")
    if args.plot:
        plot(curve, task, args.groups, args.plot, args.name, args.unit)
    return out


if __name__ == "__main__":
    main()

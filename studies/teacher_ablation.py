"""Teacher ablation: does every arm of GEM earn its place? (docs/results/TEACHER.md)

    python -m studies.teacher_ablation [--data-config experiments/data/small.yaml |
        --data DATASET_DIR] [--data-set KEY=VALUE ...] [--teacher-config FILE]
        [--mlp-config FILE] [--set KEY=VALUE ...] [--tune KEY=V1,V2,...] [--seeds 0 1 2]
        [--variants full wukong_only sequence_only mlp] [--accelerator auto|cpu|gpu]
        [--threads N] [--json OUT] [--markdown OUT]

Trains, with the library's recipe (``gemkd teacher fit``: output biases at the base rate's
logit, the epoch with the lowest validation loss kept, ``patience`` epochs of early stopping)
and the teacher config's trainer settings (``--set`` overrides any, e.g. ``max_epochs=4``):

* ``full``: GEM as configured; ``wukong_only``: ``use_sequence: false`` (no history);
  ``sequence_only``: ``use_wukong: false`` (InterFormer + pyramid, raw feature tokens);
* ``mlp``: :class:`gemkd.teachers.MLPRanker` over the same features (the MLP config's ``model:``
with
  the teacher's feature keys ``d, max_history, max_rows, n_dense_tokens, domain_token``).

Every variant gets the same budget: with ``--tune KEY=V1,V2`` each picks its value on the
validation days with the first seed. The test-day table gives NE (mean ± std over seeds) and AUC
per task, the reference rows (the oracle and the feature oracle on synthetic data; a constant at
the training base rate), and for ``full`` against each other variant the mean paired NE
difference over seeds with its std: "holds" when it exceeds 2 std.
The world is generated once (``--data-config``) or read (``--data``: any gemkd dataset, e.g.
MovieLens or KuaiRand converted by ``gemkd data ...``; then the config's day ranges must fit it).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from benchmarks.common import quiet_lightning, write_json
from gemkd.experiments.run.evaluation import (
    eval_metrics,
    feature_oracle_metrics,
    has_oracle,
    oracle_logits,
)
from gemkd.experiments.spec.load import parse_set, split_item
from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig, load_teacher_config
from gemkd.experiments.teacher.teacher_fit import fit_teacher
from gemkd.transfer.config import load_dataclass
from gemkd.transfer.data.schema import DatasetSchema, day_range
from gemkd.transfer.data.synth import SynthConfig, generate
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.numerics import binary_entropy, logit
from gemkd.transfer.options import ACCELERATORS
from gemkd.transfer.training import training_base_rates
from studies.teacher_eval import evaluate_teacher

VARIANTS = ("full", "wukong_only", "sequence_only", "mlp")
SAME_FEATURES = ("d", "max_history", "max_rows", "n_dense_tokens", "domain_token")


def parse_overrides(items: list[str] | None, what: str) -> dict[str, Any]:
    """``["key=value", ...]`` → ``{key: YAML value}`` (gemkd's one key=value parser)."""
    try:
        return parse_set(items or [], what, "KEY=VALUE")
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


def variant_config(variant: str, teacher: TeacherTrainConfig, mlp: TeacherTrainConfig,
                   seed: int) -> TeacherTrainConfig:
    """The teacher config's trainer settings with this variant's model and ``seed``."""
    if variant == "full":
        cls, model = teacher.class_path, dict(teacher.model)
    elif variant == "wukong_only":
        cls, model = teacher.class_path, {**teacher.model, "use_sequence": False}
    elif variant == "sequence_only":
        cls, model = teacher.class_path, {**teacher.model, "use_wukong": False}
    elif variant == "mlp":
        same = {k: teacher.model[k] for k in SAME_FEATURES if k in teacher.model}
        cls, model = mlp.class_path, {**mlp.model, **same}
    else:
        raise ValueError(f"unknown variant {variant!r}; known: {VARIANTS}")
    return dataclasses.replace(teacher, name=f"{teacher.name}-{variant}", class_path=cls,
                               model=model, seed=seed)


def train_and_test(cfg: TeacherTrainConfig, data: Path, run_dir: Path,
                   base_rates: dict[str, float]) -> dict[str, Any]:
    """Fit ``cfg`` (the kept epoch), then its test-day metrics."""
    t0 = time.perf_counter()
    if cfg.test_days is None:
        raise ValueError(f"config {cfg.name!r}: no test_days to evaluate on")
    summary = fit_teacher(cfg, data, run_dir, progress=False)
    test = evaluate_teacher(summary["checkpoint"], data, day_range(cfg.test_days), base_rates)
    val = summary.get("val", {})
    return {"metrics": {k: v for k, v in test.items() if k.startswith(("ne/", "auc/"))},
            "val_loss": _objective(val, base_rates, cfg.task_weights),
            "epochs": summary["best_epoch"] or summary["epochs"],
            "epochs_run": summary["epochs"], "checkpoint": Path(summary["checkpoint"]).name,
            "seconds": time.perf_counter() - t0}


def _objective(val: dict[str, float], rates: dict[str, float], weights) -> float:
    """Σ_t w_t · BCE_t on the validation days, from NE_t = BCE_t / H(p̄_t)."""
    import math

    total = 0.0
    for t, p in rates.items():
        h = binary_entropy(p)
        total += (weights or {}).get(t, 1.0) * val.get(f"ne/{t}/all", math.inf) * h
    return total


def references(data: Path, days: tuple[int, int], rates: dict[str, float]) -> dict[str, dict]:
    """The oracle and the feature oracle (synthetic data) and a constant at the base rate."""
    schema = DatasetSchema.load(data)
    tasks, doms = schema.tasks, schema.domains
    p0 = torch.tensor([rates[t] for t in tasks])
    refs = {"base rate": eval_metrics(data, days, tasks, doms, rates,
                                      lambda b: logit(p0).expand(len(b), -1))}
    if has_oracle(data):
        refs["oracle"] = eval_metrics(data, days, tasks, doms, rates, oracle_logits)
        refs["feature oracle"] = feature_oracle_metrics(data, days, tasks, doms, rates)
    return refs


def paired(results: dict[str, list[dict]], task: str) -> dict[str, tuple[float, float, bool]]:
    """For each variant v ≠ full: mean and std over seeds of NE(v) − NE(full), and whether the
    mean exceeds 2 std (full is then better beyond seed noise)."""
    out = {}
    full = [r["metrics"][f"ne/{task}/all"] for r in results.get("full", [])]
    for v, runs in results.items():
        if v == "full" or len(runs) != len(full) or not full:
            continue
        d = [r["metrics"][f"ne/{task}/all"] - f for r, f in zip(runs, full, strict=True)]
        mean = statistics.mean(d)
        std = statistics.stdev(d) if len(d) > 1 else float("nan")
        out[v] = (mean, std, bool(mean > 2 * std))
    return out


def table(results: dict[str, list[dict]], refs: dict[str, dict], tasks: list[str],
          chosen: dict[str, Any]) -> str:
    """Markdown: NE ± std and AUC per task, epochs kept, setting; the reference rows; the
    paired differences."""
    head = ["variant", "epochs kept", "setting"] + [c for t in tasks for c in (f"NE {t}",
                                                                             f"AUC {t}")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (2 * len(tasks))]
    for v, runs in results.items():
        if not runs:
            continue
        cells = [v, ",".join(str(r["epochs"]) for r in runs), str(chosen.get(v, ""))]
        for t in tasks:
            ne = [r["metrics"][f"ne/{t}/all"] for r in runs]
            auc = [r["metrics"][f"auc/{t}/all"] for r in runs]
            sd = statistics.stdev(ne) if len(ne) > 1 else float("nan")
            cells += [f"{statistics.mean(ne):.4f} ± {sd:.4f}", f"{statistics.mean(auc):.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    for name, ref in refs.items():
        cells = [f"*{name}*", "", ""]
        for t in tasks:
            auc = ref.get(f"auc/{t}/all", float("nan"))
            cells += [f"{ref[f'ne/{t}/all']:.4f}", "—" if auc != auc else f"{auc:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    diffs = paired(results, tasks[0])
    if diffs:
        lines += ["", f"Full GEM against each variant, {tasks[0]} NE(variant) − NE(full) "
                  "paired on seed:", ""]
        for v, (m, s, ok) in diffs.items():
            lines.append(f"- {v}: {m:+.4f} ± {s:.4f} — "
                         f"{'holds (> 2 std)' if ok else 'does not hold (≤ 2 std)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-config", default="experiments/data/small.yaml")
    src.add_argument("--data", default=None, help="an existing gemkd dataset instead")
    p.add_argument("--data-set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--teacher-config", default="experiments/teacher/configs/small.yaml")
    p.add_argument("--mlp-config", default="experiments/teacher/configs/mlp_small.yaml")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override trainer keys of both configs (e.g. max_epochs=4)")
    p.add_argument("--tune", default=None, metavar="KEY=V1,V2,...",
                   help="per-variant choice of one trainer key on the validation days")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--accelerator", choices=ACCELERATORS, default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="write the results here (after every run)")
    p.add_argument("--markdown", default=None, help="write the table here at the end")
    p.add_argument("--keep", default=None, help="keep the runs under this directory")
    args = p.parse_args(argv)
    quiet_lightning()
    if args.threads:
        torch.set_num_threads(args.threads)
    sets = {**parse_overrides(args.overrides, "--set"), "accelerator": args.accelerator}
    teacher = load_teacher_config(args.teacher_config, sets)
    mlp = load_teacher_config(args.mlp_config)
    if teacher.test_days is None or teacher.val_days is None:
        raise SystemExit("error: the teacher config needs val_days and test_days")
    tune = None
    if args.tune:
        try:
            key, values = split_item(args.tune, "--tune", "KEY=V1,V2,...")
        except ConfigError as e:
            raise SystemExit(f"error: {e}") from None
        tune = (key, [yaml.safe_load(v) for v in values.split(",")])
    results: dict[str, list[dict]] = {v: [] for v in args.variants}
    chosen: dict[str, Any] = {}
    out: dict[str, Any] = {"args": vars(args), "teacher": dataclasses.asdict(teacher)}
    with tempfile.TemporaryDirectory(prefix="gemkd-ablation-") as tmp:
        root = Path(args.keep or tmp)
        data = Path(args.data) if args.data else root / "data"
        if not args.data:
            synth = load_dataclass(SynthConfig, args.data_config,
                                   parse_overrides(args.data_set, "--data-set"))
            generate(synth, data, overwrite=True)
        schema = DatasetSchema.load(data)
        rates = training_base_rates(data, teacher.train_days, schema.tasks)
        refs = references(data, day_range(teacher.test_days), rates)
        print(f"data {data} ({schema.n_rows:,} rows); train {teacher.train_days}, val "
              f"{teacher.val_days}, test {teacher.test_days}", flush=True)
        for variant in args.variants:
            if tune is None:
                continue
            trials = []
            for value in tune[1]:
                cfg = variant_config(variant, dataclasses.replace(teacher, **{tune[0]: value}),
                                     mlp, args.seeds[0])
                r = train_and_test(cfg, data, root / "runs" / f"{variant}-tune-{value}", rates)
                trials.append((r["val_loss"], value, r))
                print(f"  tune {variant:<14} {tune[0]}={value}: val loss {r['val_loss']:.5f}",
                      flush=True)
            _, value, best = min(trials, key=lambda t: t[0])
            chosen[variant] = f"{tune[0]}={value}"
            results[variant].append(best)
        for i, seed in enumerate(args.seeds):
            for variant in args.variants:
                if tune is not None and i == 0:
                    r = results[variant][0]
                else:
                    base = teacher
                    if tune is not None and variant in chosen:
                        base = dataclasses.replace(teacher, **{
                            tune[0]: yaml.safe_load(chosen[variant].split("=")[1])})
                    r = train_and_test(variant_config(variant, base, mlp, seed), data,
                                       root / "runs" / f"{variant}-{seed}", rates)
                    results[variant].append(r)
                print(f"  seed {seed} {variant:<14} NE "
                      + " ".join(f"{t} {r['metrics'][f'ne/{t}/all']:.4f}" for t in schema.tasks)
                      + f" (epochs {r['epochs']}, {r['seconds']:.0f} s)", flush=True)
                out.update(results=results, chosen=chosen, references=refs)
                write_json(args.json, out)
    text = table(results, refs, schema.tasks, chosen)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return out


if __name__ == "__main__":
    main()

"""Teacher ablation on the synthetic world: does every arm of GEM earn its place?

    python benchmarks/teacher_ablation.py [--data-config experiments/data/small.yaml]
        [--teacher-config experiments/teachers/small.yaml]
        [--mlp-config experiments/teachers/mlp_small.yaml] [--seeds 0] [--epochs N]
        [--variants full wukong_only sequence_only mlp] [--json OUT]

Generates the world once into a temporary directory, then trains, with the teacher config's
trainer settings (days, batch size, learning rates, clip, epochs) and the same seeds:

* ``full``: GEM as configured;
* ``wukong_only``: GEM with ``use_sequence: false`` (no history at all);
* ``sequence_only``: GEM with ``use_wukong: false`` (InterFormer + pyramid, the non-sequence
  tokens enter the trunk raw);
* ``mlp``: :class:`teachers.MLPRanker` (the MLP config's ``model:``; its trainer keys are
  ignored, the teacher config's are used) — a 2-hidden-layer MLP over the same features.

Each is evaluated on the teacher config's test days (no validation pass: nothing is selected on
it). The table gives test NE (mean ± std over seeds) and AUC per task, and the oracle's NE/AUC
(the generator's true probabilities) on the same days, the floor no model can beat.

Cost: the variants with the sequence arm dominate. On 2 (shared, busy) CPU cores one epoch of
full GEM-small on the small world (200k training examples) took ~10 min, Wukong-only and the MLP
about an eighth of that, so the default (small world, seed 0 only, 1 epoch) is ~20 min; use
``--seeds 0 1 2`` for the mean ± std the design asks for (~1 h). The tiny world at 8k
impressions/day with the tiny GEM (batch 256, 2 epochs; the recipe of the slow test in
``tests/teachers/test_ablation.py``) runs all four variants in ~7 min per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_json  # noqa: E402
from experiments.teacher_cli import (  # noqa: E402
    TeacherTrainConfig,
    build_run,
    load_teacher_config,
)
from transfer.config import load_dataclass  # noqa: E402
from transfer.data.schema import DatasetSchema  # noqa: E402
from transfer.data.synth import SynthConfig, generate  # noqa: E402
from transfer.data.writer import day_path  # noqa: E402
from transfer.metrics import RankingMetrics  # noqa: E402
from transfer.training import build_trainer, fit, training_base_rates  # noqa: E402

VARIANTS = ("full", "wukong_only", "sequence_only", "mlp")


def variant_config(variant: str, teacher: TeacherTrainConfig, mlp: TeacherTrainConfig,
                   seed: int, epochs: int | None) -> TeacherTrainConfig:
    """The teacher config's trainer settings with this variant's model and ``seed``."""
    if variant == "full":
        cls, model = teacher.class_path, dict(teacher.model)
    elif variant == "wukong_only":
        cls, model = teacher.class_path, {**teacher.model, "use_sequence": False}
    elif variant == "sequence_only":
        cls, model = teacher.class_path, {**teacher.model, "use_wukong": False}
    elif variant == "mlp":
        cls, model = mlp.class_path, dict(mlp.model)
    else:
        raise ValueError(f"unknown variant {variant!r}; known: {VARIANTS}")
    return dataclasses.replace(
        teacher, name=f"{teacher.name}-{variant}", class_path=cls, model=model, seed=seed,
        val_days=None, max_epochs=epochs if epochs is not None else teacher.max_epochs,
    )


def train_and_test(cfg: TeacherTrainConfig, data: Path, run_dir: Path) -> dict[str, Any]:
    """Train ``cfg`` on ``data`` and return its test metrics, parameters and seconds."""
    t0 = time.perf_counter()
    dm, module = build_run(cfg, data)
    trainer = build_trainer(
        run_dir, max_epochs=cfg.max_epochs, max_steps=cfg.max_steps, precision=cfg.precision,
        accelerator=cfg.accelerator, log_every_n_steps=cfg.log_every_n_steps,
        grad_clip=cfg.grad_clip, progress_bar=False, enable_model_summary=False,
    )
    fit(module, dm, trainer)
    trainer.test(module, dataloaders=dm.test_dataloader(), verbose=False)
    return {
        "metrics": module.last_metrics["test"],
        "params": sum(p.numel() for p in module.model.parameters()),
        "seconds": time.perf_counter() - t0,
    }


def oracle_metrics(data: Path, train_days: list[int], test_days: list[int]) -> dict[str, float]:
    """Metrics of the generator's true probabilities on the test days (NE w.r.t. the training
    base rate, like every model's)."""
    schema = DatasetSchema.load(data)
    metrics = RankingMetrics(
        tasks=schema.tasks, n_domains=len(schema.domains), domain_names=schema.domains,
        base_rates=training_base_rates(data, train_days, schema.tasks),
    )
    cols = ["domain", *schema.tasks, *(schema.oracle[t] for t in schema.tasks)]
    for day in range(*test_days):
        if day not in schema.days:
            continue
        table = pq.read_table(day_path(data, day), columns=cols)
        p = np.stack([table.column(schema.oracle[t]).to_numpy() for t in schema.tasks], 1)
        p = torch.from_numpy(np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7))
        y = torch.from_numpy(
            np.stack([table.column(t).to_numpy() for t in schema.tasks], 1).astype(np.float32))
        dom = torch.from_numpy(table.column("domain").to_numpy().astype(np.int64))
        metrics.update(torch.logit(p).float(), y, dom)
    return metrics.compute()


def summarize(results: dict[str, list[dict[str, Any]]], tasks: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for variant, runs in results.items():
        row: dict[str, Any] = {"params": runs[0]["params"],
                               "seconds": statistics.mean(r["seconds"] for r in runs)}
        for task in tasks:
            for metric in ("ne", "auc"):
                vals = [r["metrics"][f"{metric}/{task}/all"] for r in runs]
                row[f"{metric}/{task}"] = statistics.mean(vals)
                row[f"{metric}/{task}/std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
        out[variant] = row
    return out


def format_table(summary: dict[str, Any], oracle: dict[str, float], tasks: list[str],
                 n_seeds: int) -> str:
    head = f"{'variant':<14} {'params':>9} {'s/run':>6}"
    for task in tasks:
        head += f" | {'NE ' + task:>17} {'AUC':>6}"
    lines = [f"test NE (mean ± std over {n_seeds} seed(s)) and AUC, all domains", head,
             "-" * len(head)]
    for variant, row in summary.items():
        line = f"{variant:<14} {row['params']:>9,d} {row['seconds']:>6.0f}"
        for task in tasks:
            ne = f"{row[f'ne/{task}']:.4f} ± {row[f'ne/{task}/std']:.4f}"
            line += f" | {ne:>17} {row[f'auc/{task}']:>6.4f}"
        lines.append(line)
    line = f"{'oracle':<14} {'':>9} {'':>6}"
    for task in tasks:
        line += f" | {oracle[f'ne/{task}/all']:>17.4f} {oracle[f'auc/{task}/all']:>6.4f}"
    lines.append(line)
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-config", default="experiments/data/small.yaml")
    p.add_argument("--teacher-config", default="experiments/teachers/small.yaml")
    p.add_argument("--mlp-config", default="experiments/teachers/mlp_small.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: the teacher config's max_epochs)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    teacher = load_teacher_config(args.teacher_config)
    mlp = load_teacher_config(args.mlp_config)
    if teacher.test_days is None:
        raise SystemExit(f"{args.teacher_config} has no test_days")
    synth = load_dataclass(SynthConfig, args.data_config)
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
    with tempfile.TemporaryDirectory(prefix="gemkd-ablation-") as tmp:
        data = Path(tmp) / "data"
        t0 = time.perf_counter()
        schema = generate(synth, data)
        print(f"world {args.data_config}: {sum(schema.rows_per_day.values()):,} examples in "
              f"{time.perf_counter() - t0:.0f} s; train days {teacher.train_days}, test days "
              f"{teacher.test_days}", flush=True)
        oracle = oracle_metrics(data, teacher.train_days, teacher.test_days)
        for seed in args.seeds:
            for variant in args.variants:
                cfg = variant_config(variant, teacher, mlp, seed, args.epochs)
                r = train_and_test(cfg, data, Path(tmp) / "runs" / f"{variant}-{seed}")
                results[variant].append(r)
                nes = " ".join(f"{t} {r['metrics'][f'ne/{t}/all']:.4f}" for t in schema.tasks)
                print(f"  seed {seed} {variant:<14} NE {nes} ({r['seconds']:.0f} s)", flush=True)
    summary = summarize(results, schema.tasks)
    print(format_table(summary, oracle, schema.tasks, len(args.seeds)))
    write_json(args.json, {
        "args": vars(args), "summary": summary,
        "oracle": {k: v for k, v in oracle.items() if k.startswith(("ne/", "auc/"))},
        "runs": {v: [{"seed": s, **r} for s, r in zip(args.seeds, rs, strict=True)]
                 for v, rs in results.items()},
    })


if __name__ == "__main__":
    main()

"""Teacher ablation on the synthetic world: does every arm of GEM earn its place?

    python benchmarks/teacher_ablation.py [--data-config experiments/data/small.yaml]
        [--data-set KEY=VALUE ...] [--teacher-config experiments/teachers/small.yaml]
        [--mlp-config experiments/teachers/mlp_small.yaml] [--set KEY=VALUE ...]
        [--tune KEY=V1,V2,...] [--seeds 0 1 2] [--epochs N] [--select best|last]
        [--variants full wukong_only sequence_only mlp] [--accelerator auto|cpu|gpu]
        [--threads N] [--json OUT]

Generates the world once into a temporary directory (``--data-set`` overrides keys of the data
config, e.g. ``examples_per_day=8000``), then trains, with the teacher config's trainer settings
(days, batch size, learning rates, clip, epochs; ``--set`` overrides any of them, e.g.
``test_days=[5,6]``) and the same seeds:

* ``full``: GEM as configured;
* ``wukong_only``: GEM with ``use_sequence: false`` (no history at all);
* ``sequence_only``: GEM with ``use_wukong: false`` (InterFormer + pyramid, the non-sequence
  tokens enter the trunk raw);
* ``mlp``: :class:`teachers.MLPRanker` over the same features: the MLP config's ``model:``
  (``hidden``, ``dropout``, ...) with the teacher's feature keys (``d``, ``max_history``,
  ``max_rows``, ``n_dense_tokens``, ``domain_token``); its trainer keys are ignored.

The recipe (every variant the same):

* output biases start at the logit of the task's training base rate (:func:`init_output_bias`):
  with a bias of 0 a task with a 0.8 % base rate starts at p = 0.5, and its first epoch is
  spent dragging every shared weight towards calibration;
* ``--select best`` (the default when the config has ``val_days``): validate after every epoch
  and test the weights of the epoch with the lowest validation loss (the training objective on
  the validation days), stopping after ``--patience`` epochs without improvement. On these worlds
  every variant over-fits its ID embeddings within 1-3 epochs, so the epoch count is chosen per
  run on validation data, never on test;
* ``--tune KEY=V1,V2``: a small per-variant tuning budget (DESIGN §6 fair comparison): with the
  first seed, train every value and keep the one with the lowest validation loss, then run the
  other seeds with it.

The table gives test NE (mean ± std over seeds) and AUC per task, the chosen setting and epochs,
and two reference rows on the same test days: ``base rate`` (a constant prediction at the
training base rate: NE > 1 there means the test days' rate drifted from the training days') and
``oracle`` (the generator's true probabilities, the floor no model can beat).

Cost. Defaults (small world, ``experiments/teachers/small.yaml``: batch 512, at most 2 epochs,
each run validates after every epoch), 3 seeds x 4 variants = 12 runs of 2 epochs:

* one H200 (``--accelerator gpu``; measured per epoch, validation included: ``full`` ~15 s,
  ``sequence_only`` ~12 s, ``wukong_only`` ~7 s, ``mlp`` ~5 s estimated): ~80 s per seed, about
  5 min for ``--seeds 0 1 2`` with start-up and world generation. ``--tune`` with two values
  adds one run per variant (~+1.5 min); ``--epochs 3`` up to half again;
* 2 shared CPU cores, ``--threads 1`` (``full`` ~85 s/epoch, ``sequence_only`` ~60 s,
  ``wukong_only`` ~19 s, ``mlp`` ~10 s): ~6 min per seed, about 20 min for 3 seeds.

The tiny world at 8k impressions/day with the small GEM (``--data-config
experiments/data/tiny.yaml --data-set examples_per_day=8000 --set 'train_days=[0,4]'
'val_days=[4,5]' 'test_days=[5,6]' batch_size=256 lr=0.001 --tune embedding_lr=0.001,0.01
--epochs 4``) runs 3 seeds x 4 variants in ~5 min on one CPU thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pyarrow.parquet as pq
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_json  # noqa: E402
from experiments.teacher_config import (  # noqa: E402
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
#: Model keys the MLP takes from the teacher config, so that it sees the same features.
SAME_FEATURES = ("d", "max_history", "max_rows", "n_dense_tokens", "domain_token")


def parse_overrides(items: list[str] | None, what: str) -> dict[str, Any]:
    """``["key=value", ...]`` → ``{key: YAML value}`` (``[5,6]`` is a list, ``1e-3`` a float)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: {what} {item!r}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


def parse_tune(item: str | None) -> tuple[str, list[Any]] | None:
    if item is None:
        return None
    key, sep, values = item.partition("=")
    if not sep or not key or not values:
        raise SystemExit(f"error: --tune {item!r}: expected KEY=V1,V2,...")
    return key, [yaml.safe_load(v) for v in values.split(",")]


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
        same = {k: teacher.model[k] for k in SAME_FEATURES if k in teacher.model}
        cls, model = mlp.class_path, {**mlp.model, **same}
    else:
        raise ValueError(f"unknown variant {variant!r}; known: {VARIANTS}")
    return dataclasses.replace(
        teacher, name=f"{teacher.name}-{variant}", class_path=cls, model=model, seed=seed,
        max_epochs=epochs if epochs is not None else teacher.max_epochs,
    )


def init_output_bias(model: torch.nn.Module, base_rates: dict[str, float],
                     tasks: list[str]) -> bool:
    """Set the output-logit biases of ``model`` to ``logit(base rate)`` per task.

    Knows the GEM heads (``domain_task``: every (domain, task) head's last bias;
    ``domain_gated``: the per-(domain, task) logit bias) and :class:`teachers.MLPRanker`
    (``out.bias``). Returns False (and changes nothing) for any other model.
    """
    from teachers.gem.heads import DomainGatedHeads, DomainTaskHeads

    if any(t not in base_rates for t in tasks):
        return False
    p = torch.tensor([min(max(base_rates[t], 1e-6), 1 - 1e-6) for t in tasks])
    logit = torch.log(p / (1 - p))
    heads = getattr(model, "heads", None)
    with torch.no_grad():
        if isinstance(heads, DomainTaskHeads):
            heads.b2.view(heads.n_domains, heads.n_tasks).copy_(logit.expand(heads.n_domains, -1))
        elif isinstance(heads, DomainGatedHeads):
            w = heads.logit_bias.weight
            w.copy_(logit.to(w).expand(w.shape[0], -1))
        elif isinstance(getattr(model, "out", None), torch.nn.Linear) and \
                model.out.out_features == len(tasks):
            model.out.bias.copy_(logit.to(model.out.bias))
        else:
            return False
    return True


def objective(metrics: dict[str, float], tasks: list[str], base_rates: dict[str, float],
              weights: dict[str, float] | None) -> float:
    """The training objective Σ_t w_t · BCE_t on an evaluation split, from its NE
    (NE_t = BCE_t / H(p̄_t), p̄_t the training base rate)."""
    total = 0.0
    for t in tasks:
        p = base_rates[t]
        h = -(p * math.log(p) + (1 - p) * math.log(1 - p))
        total += (weights or {}).get(t, 1.0) * metrics[f"ne/{t}/all"] * h
    return total


class KeepBest(pl.Callback):
    """After each validation pass keep a copy of the weights with the lowest validation
    objective; stop training after ``patience`` passes without improvement."""

    def __init__(self, tasks: list[str], base_rates: dict[str, float],
                 weights: dict[str, float] | None, patience: int) -> None:
        self.tasks, self.base_rates, self.weights = tasks, base_rates, weights
        self.patience = patience
        self.best: float = math.inf
        self.best_epoch = 0
        self.best_metrics: dict[str, float] = {}
        self.history: list[float] = []
        self._state: dict[str, torch.Tensor] | None = None

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or "val" not in pl_module.last_metrics:
            return
        metrics = pl_module.last_metrics["val"]
        loss = objective(metrics, self.tasks, self.base_rates, self.weights)
        self.history.append(loss)
        if loss < self.best:
            self.best, self.best_epoch = loss, len(self.history)
            self.best_metrics = {k: float(v) for k, v in metrics.items()
                                 if k.startswith(("ne/", "auc/")) and k.endswith("/all")}
            self._state = {k: v.detach().to("cpu", copy=True)
                           for k, v in pl_module.model.state_dict().items()}
        elif len(self.history) - self.best_epoch >= self.patience:
            trainer.should_stop = True

    def restore(self, pl_module: pl.LightningModule) -> None:
        if self._state is not None:
            pl_module.model.load_state_dict(self._state)


def train_and_test(cfg: TeacherTrainConfig, data: Path, run_dir: Path, *, accelerator: str,
                   select: str, patience: int, init_bias: bool = True) -> dict[str, Any]:
    """Train ``cfg`` on ``data``; return its test metrics (at the selected epoch), the
    validation metrics there, parameters and seconds."""
    t0 = time.perf_counter()
    dm, module = build_run(cfg, data)
    biased = init_output_bias(module.model, module.base_rates, module.tasks) if init_bias \
        else False
    keep = None
    callbacks: list[pl.Callback] = []
    if select == "best":
        keep = KeepBest(module.tasks, module.base_rates, cfg.task_weights, patience)
        callbacks.append(keep)
    trainer = build_trainer(
        run_dir, max_epochs=cfg.max_epochs, max_steps=cfg.max_steps, precision=cfg.precision,
        accelerator=accelerator, log_every_n_steps=cfg.log_every_n_steps,
        grad_clip=cfg.grad_clip, progress_bar=False, enable_model_summary=False,
        callbacks=callbacks,
    )
    fit(module, dm, trainer)
    if keep is not None:
        keep.restore(module)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ckpt_path.*")
        trainer.test(module, dataloaders=dm.test_dataloader(), verbose=False)
    return {
        "metrics": module.last_metrics["test"],
        "val": keep.best_metrics if keep else {},
        "val_objective": min(keep.history) if keep and keep.history else math.inf,
        "val_history": keep.history if keep else [],
        "epoch": keep.best_epoch if keep else trainer.current_epoch,
        "epochs_run": len(keep.history) if keep else trainer.current_epoch,
        "bias_init": biased,
        "params": sum(p.numel() for p in module.model.parameters()),
        "seconds": time.perf_counter() - t0,
    }


def reference_metrics(data: Path, train_days: list[int], test_days: list[int]
                      ) -> dict[str, dict[str, float]]:
    """Metrics on the test days of the generator's true probabilities (``oracle``) and of a
    constant prediction at the training base rate (``base rate``), NE w.r.t. the training base
    rate like every model's."""
    schema = DatasetSchema.load(data)
    base = training_base_rates(data, train_days, schema.tasks)
    args = dict(tasks=schema.tasks, n_domains=len(schema.domains), domain_names=schema.domains,
                base_rates=base)
    oracle, prior = RankingMetrics(**args), RankingMetrics(**args)
    cols = ["domain", *schema.tasks, *(schema.oracle[t] for t in schema.tasks)]
    p0 = torch.tensor([base[t] for t in schema.tasks], dtype=torch.float64)
    for day in range(*test_days):
        if day not in schema.days:
            continue
        table = pq.read_table(day_path(data, day), columns=cols)
        p = np.stack([table.column(schema.oracle[t]).to_numpy() for t in schema.tasks], 1)
        p = torch.from_numpy(np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7))
        y = torch.from_numpy(
            np.stack([table.column(t).to_numpy() for t in schema.tasks], 1).astype(np.float32))
        dom = torch.from_numpy(table.column("domain").to_numpy().astype(np.int64))
        oracle.update(torch.logit(p).float(), y, dom)
        prior.update(torch.logit(p0).float().expand(len(y), -1), y, dom)
    return {"oracle": oracle.compute(), "base rate": prior.compute()}


def summarize(results: dict[str, list[dict[str, Any]]], tasks: list[str],
              chosen: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for variant, runs in results.items():
        if not runs:
            continue
        row: dict[str, Any] = {"params": runs[0]["params"],
                               "seconds": statistics.mean(r["seconds"] for r in runs),
                               "epochs": [r["epoch"] for r in runs],
                               "chosen": chosen.get(variant)}
        for task in tasks:
            for metric in ("ne", "auc"):
                vals = [float(r["metrics"][f"{metric}/{task}/all"]) for r in runs]
                row[f"{metric}/{task}"] = statistics.mean(vals)
                row[f"{metric}/{task}/std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
                row[f"{metric}/{task}/seeds"] = vals
        out[variant] = row
    return out


def format_table(summary: dict[str, Any], refs: dict[str, dict[str, float]], tasks: list[str],
                 n_seeds: int) -> str:
    head = f"{'variant':<14} {'params':>9} {'s/run':>6} {'epochs':>7} {'setting':>20}"
    for task in tasks:
        head += f" | {'NE ' + task:>17} {'AUC':>6}"
    lines = [f"test NE (mean ± std over {n_seeds} seed(s)) and AUC, all domains", head,
             "-" * len(head)]
    for variant, row in summary.items():
        epochs = ",".join(str(e) for e in row["epochs"])
        setting = "" if row["chosen"] is None else f"{row['chosen'][0]}={row['chosen'][1]}"
        line = (f"{variant:<14} {row['params']:>9,d} {row['seconds']:>6.0f} {epochs:>7} "
                f"{setting:>20}")
        for task in tasks:
            ne = f"{row[f'ne/{task}']:.4f} ± {row[f'ne/{task}/std']:.4f}"
            line += f" | {ne:>17} {row[f'auc/{task}']:>6.4f}"
        lines.append(line)
    for name, ref in refs.items():
        line = f"{name:<14} {'':>9} {'':>6} {'':>7} {'':>20}"
        for task in tasks:
            auc = ref[f"auc/{task}/all"]
            auc_s = f"{auc:>6.4f}" if auc == auc else f"{'-':>6}"  # nan for a constant
            line += f" | {ref[f'ne/{task}/all']:>17.4f} {auc_s}"
        lines.append(line)
    return "\n".join(lines)


def quiet_lightning() -> None:
    """A dozen short fits: keep Lightning's per-fit banners and known noise out of the log."""
    import logging

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*Couldn't infer the batch indices.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def resolve_accelerator(name: str) -> str:
    if name == "gpu" and not torch.cuda.is_available():
        raise SystemExit("error: --accelerator gpu but torch sees no CUDA device")
    if name == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return name


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-config", default="experiments/data/small.yaml")
    p.add_argument("--data-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="override keys of the data config (e.g. examples_per_day=8000)")
    p.add_argument("--teacher-config", default="experiments/teachers/small.yaml")
    p.add_argument("--mlp-config", default="experiments/teachers/mlp_small.yaml")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override trainer keys of the teacher config (e.g. test_days=[5,6])")
    p.add_argument("--tune", default=None, metavar="KEY=V1,V2,...",
                   help="per-variant choice of one trainer key on the validation days, first "
                        "seed (e.g. embedding_lr=0.001,0.01)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=int, default=None,
                   help="maximum training epochs (default: the teacher config's max_epochs)")
    p.add_argument("--select", choices=["best", "last"], default=None,
                   help="test the epoch with the best validation objective (default when the "
                        "config has val_days) or the last one")
    p.add_argument("--patience", type=int, default=1,
                   help="with --select best: stop after this many epochs without improvement")
    p.add_argument("--no-bias-init", action="store_true",
                   help="leave the output biases at their random initialisation")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--accelerator", choices=["auto", "cpu", "gpu"], default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--json", default=None, help="write the results here (after every run)")
    args = p.parse_args(argv)
    quiet_lightning()
    if args.threads:
        torch.set_num_threads(args.threads)
    accelerator = resolve_accelerator(args.accelerator)
    if accelerator == "gpu":
        torch.set_float32_matmul_precision("high")

    teacher = load_teacher_config(args.teacher_config,
                                  parse_overrides(args.overrides, "--set"))
    mlp = load_teacher_config(args.mlp_config)
    if teacher.test_days is None:
        raise SystemExit(f"error: {args.teacher_config} has no test_days (pass --set "
                         "test_days=[first,end])")
    select = args.select or ("best" if teacher.val_days is not None else "last")
    if select == "best" and teacher.val_days is None:
        raise SystemExit("error: --select best needs val_days in the teacher config")
    tune = parse_tune(args.tune)
    if tune is not None and select != "best":
        raise SystemExit("error: --tune needs --select best (and val_days in the config)")
    synth = load_dataclass(SynthConfig, args.data_config,
                           parse_overrides(args.data_set, "--data-set"))
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
    chosen: dict[str, Any] = {}
    tuning: dict[str, list[dict[str, Any]]] = {}
    out: dict[str, Any] = {}

    def record(refs, tasks) -> None:
        summary = summarize(results, tasks, chosen)
        out.update({
            "args": vars(args), "accelerator": accelerator, "select": select,
            "teacher": dataclasses.asdict(teacher), "summary": summary,
            "references": {n: {k: float(v) for k, v in r.items()
                               if k.startswith(("ne/", "auc/"))} for n, r in refs.items()},
            "tuning": tuning,
            "runs": {v: [{"seed": s, **r} for s, r in zip(args.seeds, rs, strict=False)]
                     for v, rs in results.items()},
        })
        write_json(args.json, out)

    run_kw = dict(accelerator=accelerator, select=select, patience=args.patience,
                  init_bias=not args.no_bias_init)
    with tempfile.TemporaryDirectory(prefix="gemkd-ablation-") as tmp:
        data = Path(tmp) / "data"
        t0 = time.perf_counter()
        schema = generate(synth, data)
        print(f"world {args.data_config} {' '.join(args.data_set)}: "
              f"{sum(schema.rows_per_day.values()):,} examples in {time.perf_counter() - t0:.0f} "
              f"s; train days {teacher.train_days}, val days {teacher.val_days}, test days "
              f"{teacher.test_days}; {accelerator}, select {select}", flush=True)
        refs = reference_metrics(data, teacher.train_days, teacher.test_days)
        for variant in args.variants:
            if tune is None:
                continue
            key, values = tune
            trials = []
            for value in values:
                base = dataclasses.replace(teacher, **{key: value})
                cfg = variant_config(variant, base, mlp, args.seeds[0], args.epochs)
                r = train_and_test(cfg, data, Path(tmp) / "runs" / f"{variant}-{key}-{value}",
                                   **run_kw)
                score = r["val_objective"]
                trials.append({"value": value, "val_objective": score, "run": r})
                print(f"  tune {variant:<14} {key}={value}: val objective {score:.5f}, "
                      f"epoch {r['epoch']} ({r['seconds']:.0f} s)", flush=True)
            best = min(trials, key=lambda t: t["val_objective"])
            chosen[variant] = (key, best["value"])
            tuning[variant] = [{"value": t["value"], "val_objective": t["val_objective"],
                                "epoch": t["run"]["epoch"], "seconds": t["run"]["seconds"]}
                               for t in trials]
            results[variant].append(best["run"])  # the first seed's run with the chosen value
            record(refs, schema.tasks)
        for i, seed in enumerate(args.seeds):
            for variant in args.variants:
                if tune is not None and i == 0:
                    r = results[variant][0]
                else:
                    base = teacher if variant not in chosen else dataclasses.replace(
                        teacher, **{chosen[variant][0]: chosen[variant][1]})
                    cfg = variant_config(variant, base, mlp, seed, args.epochs)
                    r = train_and_test(cfg, data, Path(tmp) / "runs" / f"{variant}-{seed}",
                                       **run_kw)
                    results[variant].append(r)
                nes = " ".join(f"{t} {r['metrics'][f'ne/{t}/all']:.4f}" for t in schema.tasks)
                print(f"  seed {seed} {variant:<14} NE {nes} (epoch {r['epoch']}, "
                      f"{r['seconds']:.0f} s)", flush=True)
                record(refs, schema.tasks)
    print(format_table(out["summary"], refs, schema.tasks, len(args.seeds)))
    return out


if __name__ == "__main__":
    main()

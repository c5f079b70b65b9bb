"""``run_experiment``: data → teacher(s) per lag → store → codes → tuning → variants × seeds.

Every expensive step is cached by its config hash under ``RUN_DIR/cache`` (reruns and resumed
crashes skip it); each finished student run is appended to ``RUN_DIR/runs.jsonl``, so a killed
run continues where it stopped and ends with the same ``results.csv``.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.run import steps
from experiments.run.cache import STEP_CODE, code_hash
from experiments.run.domain_fm import fit_domain_fms
from experiments.run.methods import variant_needs
from experiments.run.results import derive, load_done, record, rows_of
from experiments.run.student import Inputs, StudentJob, train_student
from experiments.run.tuning import tune
from experiments.run.validate import check_spec
from experiments.spec.model import RunSpec
from transfer.training import training_base_rates

TEACHER_NEEDS = {"teacher", "teacher_emb"}


class Log:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "a")  # noqa: SIM115 - kept open for the run

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def run_experiment(spec: RunSpec, out: str | Path) -> pd.DataFrame:
    """Run ``spec`` into the run directory ``out`` (created; a rerun resumes) and return the
    results table (also written to ``out/results.csv``)."""
    out = Path(out)
    check_spec(spec)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"
    log = Log(out / "log.txt")
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    (out / "environment.json").write_text(json.dumps(_environment(), indent=2))
    (out / "command.txt").write_text(" ".join(sys.argv) + "\n")
    log(f"experiment {spec.name}: variants {spec.variant_names}, seeds {spec.seeds}, "
        f"lags {spec.lags}")

    data, data_key = steps.prepare_data(spec, cache, log)
    tasks = list(spec.student_tasks)
    from transfer.data.schema import DatasetSchema

    domains = DatasetSchema.load(data).domains
    only = [spec.student_domain] if spec.student_domain else None  # the vertical's own traffic
    student_days, eval_days = tuple(spec.student_days), tuple(spec.eval_days)
    base_rates = training_base_rates(data, student_days, tasks, only)
    oracle, feature = {}, {}
    if steps.has_oracle(data):  # the floor, and what a model could reach from what it sees
        oracle = steps.eval_metrics(data, eval_days, tasks, domains, base_rates,
                                    steps.oracle_logits, only)
        feature = steps.feature_oracle_metrics(data, eval_days, tasks, domains, base_rates, only)
    done = load_done(out / "runs.jsonl")
    tuning_rows: list[dict] = []
    rows: list[dict] = []
    for lag in spec.lags:
        first, train_end = spec.teacher_window(lag)
        log(f"== teacher lag {lag}: teacher learns from days [{first}, {train_end})")
        inputs = lag_inputs(spec, lag, data, data_key, only or domains, cache, log)
        sources = {name: steps.eval_metrics(data, eval_days, tasks, domains, base_rates,
                                            steps.store_logits(store, tasks), only)
                   for name, store in inputs.stores.items()}
        for name, m in sources.items():
            log(f"  {name} teacher NE on evaluation days: "
                f"{ {t: round(m[f'ne/{t}/all'], 4) for t in tasks} }")
        tag = _inputs_tag(spec, inputs)
        for variant in spec.variants:
            params = tune(spec, variant, lag, train_end, data, inputs, base_rates, done, out,
                          log, tuning_rows, tag)
            for seed in spec.seeds:
                key = f"final|{variant.name}|{seed}|{lag}|{tag}"
                if key not in done:
                    job = StudentJob(variant, params, seed, student_days, eval_days,
                                     train_end - 1)
                    curve = out / "curves" / f"{variant.name}_seed{seed}_lag{lag}.csv"
                    res = train_student(spec, job, data, inputs, base_rates, curve)
                    done[key] = record(out / "runs.jsonl", key, res)
                    log(f"  {variant.name:15s} seed {seed}: NE {tasks[0]} "
                        f"{res['metrics'][f'ne/{tasks[0]}/all']:.4f} "
                        f"({res['examples_per_second']:.0f} ex/s)")
                else:
                    log(f"[cached] {variant.name} seed {seed} (runs.jsonl)")
                source = sources[variant.teacher] if variant_needs(variant) & TEACHER_NEEDS \
                    else {}
                rows += rows_of(variant.name, seed, lag, done[key], sources["gem"], source,
                                oracle, feature, tasks, only or domains)
    tuning_columns = ["variant", "teacher_lag_days", "param", "value", "chosen", "val_ne"]
    pd.DataFrame(tuning_rows, columns=tuning_columns).to_csv(out / "tuning.csv", index=False)
    results = derive(pd.DataFrame(rows))
    results.to_csv(out / "results.csv", index=False)
    log(f"wrote {out / 'results.csv'} ({len(results)} rows)")
    return results


def lag_inputs(spec: RunSpec, lag: int, data: Path, data_key: dict, fm_domains: list[str],
               cache: Path, log) -> Inputs:
    """The teacher sources, codes and teacher weights the lag's students use."""
    from experiments.teacher_export import model_weights
    from transfer.repr_features import AsOfCodes, CodeStore
    from transfer.training.trainer import best_or_last

    needs = set().union(*(variant_needs(v) for v in spec.variants))
    weights = None
    if spec.teacher.store is not None:
        stores = {"gem": Path(spec.teacher.store)}
        log(f"  teacher: the imported store {stores['gem']}")
    else:
        gem_cfg = steps.teacher_config(spec, lag, spec.teacher)
        gem_run = steps.fit_teacher(gem_cfg, data, data_key, cache, log)
        layer = spec.repr.layer or gem_cfg.repr_layer
        stores = {"gem": steps.export_teacher(gem_run, data, layer, cache, log)}
        ckpt = best_or_last(gem_run)
        weights = lambda: model_weights(ckpt)  # noqa: E731 - loaded only by param sharing
    if any(v.teacher == "domain_fm" for v in spec.variants):
        fm_cfg = steps.teacher_config(spec, lag, spec.hierarchical)
        stores["domain_fm"] = fit_domain_fms(fm_cfg, data, data_key, stores["gem"], fm_domains,
                                             cache, log)
    codes = None
    if "codes" in needs:
        codes_dir = steps.build_codes(stores["gem"], spec.teacher_window(lag), spec.repr,
                                      spec.seeds[0], cache, log)
        codes = AsOfCodes(CodeStore(codes_dir), max_events=spec.repr.max_events)
    return Inputs(stores, codes, weights)


def _inputs_tag(spec: RunSpec, inputs: Inputs) -> str:
    """What a student run's result depends on besides variant, seed and lag: the spec's student
    settings and the cached upstream steps (their names carry their config hashes). A rerun
    into the same RUN_DIR after changing any of them redoes the student runs instead of
    reusing stale lines of runs.jsonl."""
    spec_part = {k: v for k, v in spec.to_dict().items()
                 if k not in ("name", "seeds", "variants", "teacher_lag_days")}
    upstream = {k: v.parent.name for k, v in inputs.stores.items()}
    if inputs.codes is not None:
        upstream["codes"] = Path(inputs.codes.store.path).parent.name
    variants = {v.name: v.to_value() for v in spec.variants}
    blob = json.dumps({"spec": spec_part, "upstream": upstream, "variants": variants,
                       "code": code_hash(STEP_CODE["students"])}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _environment() -> dict[str, Any]:
    import lightning
    import torch

    from experiments.version import __version__

    return {"gemkd": __version__, "python": platform.python_version(),
            "platform": platform.platform(), "torch": torch.__version__,
            "lightning": lightning.__version__, "threads": torch.get_num_threads()}

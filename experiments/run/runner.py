"""``gemkd run``: data → teacher(s) per lag → store → codes → tuning → variants × seeds.

Every expensive step is cached by its config hash under ``RUN_DIR/cache`` (reruns and resumed
crashes skip it); each finished student run is appended to ``RUN_DIR/runs.jsonl``, so a killed
run continues where it stopped and ends with the same ``results.csv``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.run import steps
from experiments.run.domain_fm import fit_domain_fms
from experiments.run.spec import RunSpec
from experiments.run.student import VARIANT_PARTS, CodeFeatures, StudentJob, train_student
from transfer.errors import ConfigError
from transfer.training import training_base_rates

# Which tuning lists each variant searches (every variant gets the same budget per knob).
TUNED = {"kd_weight": "teacher", "temperature": "teacher", "aux_beta": "aux",
         "adapter_hidden": "adapter"}
REPR_KEYS = ("layer", "code_dim", "bits", "max_events", "epochs")
RESULT_COLUMNS = ["variant", "seed", "domain", "task", "teacher_lag_days", "ne", "auc",
                  "calibration", "ne_baseline", "ne_teacher", "ne_oracle", "delta_ne",
                  "transfer_ratio", "efficiency_vs_kd", "train_seconds", "examples_per_second"]


class Log:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "a")  # noqa: SIM115 - kept open for the run

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def grid(spec: RunSpec, variant: str) -> list[dict[str, float]]:
    parts = VARIANT_PARTS[variant]
    lists = {k: spec.tuning.get(k, [1.0]) for k, need in TUNED.items() if parts.get(need)}
    keys = sorted(lists)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(lists[k] for k in keys))]


def check_spec(spec: RunSpec) -> None:
    """Build every nested section of the spec once, before anything is written: a typo or a
    wrong type in ``data:``, ``teacher:``, ``hierarchical:``, ``tuning:``, ``repr:`` or
    ``student:`` is one error up front, not a failure after minutes of teacher training that
    leaves a half-made run directory."""
    from students.registry import check_init_args, resolve_student_class

    steps.data_plan(spec)
    for lag in spec.lags:
        steps.teacher_config(spec, spec.teacher_days - lag, spec.teacher)
        if "hierarchical" in spec.variants:
            steps.teacher_config(spec, spec.teacher_days - lag, spec.hierarchical)
    for section, known in (("tuning", TUNED), ("repr", REPR_KEYS)):
        unknown = sorted(set(getattr(spec, section)) - set(known))
        if unknown:
            raise ConfigError(f"spec {section}: unknown key {unknown[0]!r}; valid keys: "
                              f"{', '.join(sorted(known))}")
    for key, values in spec.tuning.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"spec tuning: key {key!r} must be a non-empty list of values to "
                              f"try, got {values!r}")
    extra = sorted(set(spec.student) - {"class_path", "init_args"})
    if extra:
        raise ConfigError(f"spec student: unknown key {extra[0]!r} (expected class_path, "
                          "init_args)")
    class_path = spec.student.get("class_path", "mlp")
    init_args = spec.student.get("init_args") or {}
    if not isinstance(class_path, str) or not isinstance(init_args, dict):
        raise ConfigError(f"spec student: expected class_path: <name or import path> and "
                          f"init_args: <mapping>, got {spec.student!r}")
    if any(VARIANT_PARTS[v].get("repr") for v in spec.variants):
        init_args = {**init_args, "repr_dim": int(spec.repr.get("code_dim", 8))}
    check_init_args(resolve_student_class(class_path), init_args)


def run_experiment(spec: RunSpec, out: Path) -> pd.DataFrame:
    check_spec(spec)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"
    log = Log(out / "log.txt")
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    (out / "environment.json").write_text(json.dumps(_environment(), indent=2))
    (out / "command.txt").write_text(" ".join(sys.argv) + "\n")
    log(f"experiment {spec.name}: variants {spec.variants}, seeds {spec.seeds}, "
        f"lags {spec.lags}")

    data, data_key = steps.prepare_data(spec, cache, log)
    tasks = list(spec.student_tasks)
    from transfer.data.schema import DatasetSchema

    domains = DatasetSchema.load(data).domains
    only = [spec.student_domain] if spec.student_domain else None  # the vertical's own traffic
    student_days = tuple(spec.student_days)
    eval_days = tuple(spec.eval_days)
    base_rates = training_base_rates(data, student_days, tasks, only)
    oracle = (steps.eval_metrics(data, eval_days, tasks, domains, base_rates,
                                 steps.oracle_logits, only) if steps.has_oracle(data) else {})
    done = _load_done(out / "runs.jsonl")
    tuning_rows: list[dict] = []
    rows: list[dict] = []
    for lag in spec.lags:
        train_end = spec.teacher_days - lag
        log(f"== teacher lag {lag}: teacher trains on days [0, {train_end})")
        gem_cfg = steps.teacher_config(spec, train_end, spec.teacher)
        gem_run = steps.fit_teacher(gem_cfg, data, data_key, cache, log)
        layer = spec.repr.get("layer", "trunk")
        stores: dict[str, Path | None] = {
            "gem": steps.export_teacher(gem_run, data, layer, cache, log)}
        if "hierarchical" in spec.variants:
            fm_cfg = steps.teacher_config(spec, train_end, spec.hierarchical)
            stores["fm"] = fit_domain_fms(fm_cfg, data, data_key, stores["gem"],
                                          only or domains, cache, log)
        codes = None
        if any(VARIANT_PARTS[v].get("repr") for v in spec.variants):
            codes_dir = steps.build_codes(stores["gem"], train_end, spec.repr, spec.seeds[0],
                                          cache, log)
            codes = CodeFeatures(codes_dir, int(spec.repr.get("max_events", 50)))
        teacher_eval = steps.eval_metrics(data, eval_days, tasks, domains, base_rates,
                                          steps.store_logits(stores["gem"], tasks), only)
        log(f"  teacher NE on evaluation days: "
            f"{ {t: round(teacher_eval[f'ne/{t}/all'], 4) for t in tasks} }")
        inputs = _inputs_tag(spec, stores, codes)
        for variant in spec.variants:
            params = _tune(spec, variant, lag, train_end, data, stores, codes, base_rates, done,
                           out, log, tuning_rows, inputs)
            for seed in spec.seeds:
                key = f"final|{variant}|{seed}|{lag}|{inputs}"
                if key not in done:
                    job = StudentJob(variant, params, seed, student_days, eval_days,
                                     train_end - 1)
                    res = train_student(spec, job, data, stores, codes, base_rates,
                                        out / "curves" / f"{variant}_seed{seed}_lag{lag}.csv")
                    done[key] = _record(out / "runs.jsonl", key, res)
                    log(f"  {variant:15s} seed {seed}: NE {tasks[0]} "
                        f"{res['metrics'][f'ne/{tasks[0]}/all']:.4f} "
                        f"({res['examples_per_second']:.0f} ex/s)")
                else:
                    log(f"[cached] {variant} seed {seed} (runs.jsonl)")
                rows += _rows(variant, seed, lag, done[key], teacher_eval, oracle, tasks,
                              only or domains)
    tuning_columns = ["variant", "teacher_lag_days", "param", "value", "chosen", "val_ne"]
    pd.DataFrame(tuning_rows, columns=tuning_columns).to_csv(out / "tuning.csv", index=False)
    results = _derive(pd.DataFrame(rows))
    results.to_csv(out / "results.csv", index=False)
    log(f"wrote {out / 'results.csv'} ({len(results)} rows)")
    return results


def _inputs_tag(spec: RunSpec, stores: dict, codes) -> str:
    """What a student run's result depends on besides variant, seed and lag: the spec's student
    settings and the cached upstream steps (their names carry their config hashes). A rerun
    into the same RUN_DIR after changing any of them redoes the student runs instead of
    reusing stale lines of runs.jsonl."""
    spec_part = {k: v for k, v in spec.to_dict().items()
                 if k not in ("name", "seeds", "variants", "teacher_lag_days")}
    upstream = {k: v.parent.name for k, v in stores.items() if v is not None}
    if codes is not None:
        upstream["codes"] = codes.path.parent.name
    blob = json.dumps({"spec": spec_part, "upstream": upstream}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _tune(spec, variant, lag, train_end, data, stores, codes, base_rates, done, out, log,
          tuning_rows, inputs: str) -> dict[str, float]:
    """Pick the variant's knobs on the last student day (validation), first seed only."""
    candidates = grid(spec, variant)
    if len(candidates) <= 1:
        params = candidates[0] if candidates else {}
        for k, v in params.items():
            tuning_rows.append({"variant": variant, "teacher_lag_days": lag, "param": k,
                                "value": v, "chosen": True, "val_ne": float("nan")})
        return params
    first, end = spec.student_days
    task = spec.student_tasks[0]
    scores = []
    for params in candidates:
        key = f"tune|{variant}|{lag}|{json.dumps(params, sort_keys=True)}|{inputs}"
        if key not in done:
            job = StudentJob(variant, params, spec.seeds[0], (first, end - 1), (end - 1, end),
                             train_end - 1)
            res = train_student(spec, job, data, stores, codes, base_rates)
            done[key] = _record(out / "runs.jsonl", key, res)
        scores.append(done[key]["metrics"][f"ne/{task}/all"])
    best = min(range(len(candidates)), key=lambda i: scores[i])
    for i, (params, score) in enumerate(zip(candidates, scores, strict=True)):
        for k, v in params.items():
            tuning_rows.append({"variant": variant, "teacher_lag_days": lag, "param": k,
                                "value": v, "chosen": i == best, "val_ne": score})
    log(f"  tuned {variant}: {candidates[best]} (validation NE {scores[best]:.4f})")
    return candidates[best]


def _rows(variant, seed, lag, res, teacher, oracle, tasks, domains) -> list[dict]:
    rows = []
    for task, domain in itertools.product(tasks, [*domains, "all"]):
        m = res["metrics"]
        rows.append({
            "variant": variant, "seed": seed, "domain": domain, "task": task,
            "teacher_lag_days": lag, "ne": m[f"ne/{task}/{domain}"],
            "auc": m.get(f"auc/{task}/{domain}", float("nan")),
            "calibration": m[f"calibration/{task}/{domain}"],
            "ne_teacher": teacher[f"ne/{task}/{domain}"],
            "ne_oracle": oracle.get(f"ne/{task}/{domain}", float("nan")),
            "train_seconds": res["train_seconds"],
            "examples_per_second": res["examples_per_second"],
        })
    return rows


def _derive(df: pd.DataFrame) -> pd.DataFrame:
    """ne_baseline, ΔNE, TR and efficiency vs KD, matched on seed, domain, task and lag."""
    keys = ["seed", "domain", "task", "teacher_lag_days"]
    base = df[df.variant == "baseline"][keys + ["ne"]].rename(columns={"ne": "ne_baseline"})
    df = df.merge(base, on=keys, how="left")
    df["delta_ne"] = df["ne_baseline"] - df["ne"]
    df["transfer_ratio"] = df["delta_ne"] / (df["ne_baseline"] - df["ne_teacher"])
    kd = df[df.variant == "kd"][keys + ["delta_ne"]].rename(columns={"delta_ne": "delta_kd"})
    df = df.merge(kd, on=keys, how="left")
    # a ratio to a KD gain that is not a gain means nothing: left empty (the report says so)
    df["efficiency_vs_kd"] = (df["delta_ne"] / df["delta_kd"]).where(df["delta_kd"] > 0)
    return df[RESULT_COLUMNS]


def _record(path: Path, key: str, res: dict) -> dict:
    with open(path, "a") as f:
        f.write(json.dumps({"key": key, **res}) + "\n")
    return res


def _load_done(path: Path) -> dict[str, dict]:
    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line torn by a kill: that run is redone
                continue
            done[rec.pop("key")] = rec
    return done


def _environment() -> dict[str, Any]:
    import lightning
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(),
            "torch": torch.__version__, "lightning": lightning.__version__,
            "threads": torch.get_num_threads()}

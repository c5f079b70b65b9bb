"""What a lag's students learn from: the teacher sources (GEM's store, the domain FMs' store),
the LoopFM codes and the teacher's weights, each a cached step; and the tag that ties a student
run's result in ``runs.jsonl`` to exactly those inputs."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from gemkd.experiments.run.codes_step import build_codes
from gemkd.experiments.run.context import RunContext
from gemkd.experiments.run.domain_fm_step import fit_domain_fms
from gemkd.experiments.run.jobs import InputPaths
from gemkd.experiments.run.methods import variant_needs
from gemkd.experiments.run.solaris_step import build_pairs
from gemkd.experiments.run.teacher_steps import (
    cached_export,
    cached_fit,
    lag_checkpoint,
)
from gemkd.experiments.spec.run_spec import RunSpec, VariantSpec
from gemkd.transfer.io import fs


def store_days(spec: RunSpec, lag: int) -> tuple[int, int] | None:
    """The days a lag's teacher store covers: from its window's first day (its codes and domain
    FMs learn from the window; the students read later days) to the last evaluation day, not
    every day of a long history; None (every day) for a window teacher of every day."""
    first = spec.teacher_window(lag)[0]
    if spec.teacher_protocol == "streaming" or first > 0:
        return first, spec.eval_days[1]
    return None


def lag_inputs(ctx: RunContext, lag: int, data, data_key: dict, fm_domains: list[str]
               ) -> InputPaths:
    """The teacher sources, codes, teacher checkpoint and SOLARIS pairs the lag's students use
    (each a cached step under the run's cache, logged to its log and tracker)."""
    spec, cache, log, tracker = ctx.spec, ctx.cache, ctx.log, ctx.tracker
    needs = set().union(*(variant_needs(v) for v in spec.variants))
    ckpt, days, gem_run, layer = None, None, None, None
    if spec.teacher.store is not None:
        stores = {"gem": fs.as_where(spec.teacher.store)}
        log(f"  teacher: the imported store {stores['gem']}")
    else:
        gem_cfg = ctx.plan.teachers[lag]
        streaming = spec.teacher_protocol == "streaming"
        gem_run = cached_fit(gem_cfg, data, data_key, cache, log, tracker=tracker,
                             run_name="teacher" if streaming else f"teacher-lag{lag}")
        layer = spec.repr.layer or gem_cfg.repr_layer
        ckpt = lag_checkpoint(spec, gem_run, lag)
        days = store_days(spec, lag)
        stores = {"gem": cached_export(ckpt, data, layer, cache, log, days=days)}
    if any(v.teacher == "domain_fm" for v in spec.variants):
        fm_cfg = ctx.plan.domain_fms[lag]
        if fm_cfg.init_from == "gem":  # the domain FMs start from this lag's GEM (validated)
            fm_cfg = dataclasses.replace(fm_cfg, init_from=str(ckpt))
        stores["domain_fm"] = fit_domain_fms(fm_cfg, data, data_key, stores["gem"], fm_domains,
                                             cache, log, days=days)
    codes = None
    if "codes" in needs:
        codes = build_codes(stores["gem"], spec.teacher_window(lag), spec.repr,
                                  spec.seeds[0], cache, log)
    pairs = None
    if "pairs" in needs:  # validated: a trained teacher (an imported store has no checkpoint)
        assert gem_run is not None and ckpt is not None and layer is not None
        pairs = build_pairs(spec, data, gem_run, ckpt, spec.solaris.layer or layer, cache, log)
    return InputPaths(stores, codes, ckpt, pairs)


def inputs_tag(spec: RunSpec, inputs: InputPaths, threads: int) -> str:
    """What every student run of a cell depends on besides variant, seed and lag: the spec's
    student settings, the source of gemkd and of the user's student class, and the torch
    threads the run uses (torch's CPU sums depend on the count, and a search amplifies the
    difference). A rerun into the same RUN_DIR after changing any of them redoes the student
    runs instead of reusing stale lines of runs.jsonl. Where results are tracked (``logger``)
    is not part, nor which students it keeps, nor which variants the spec lists, nor
    ``solaris`` (its settings reach a variant through the pair step's name): :func:`variant_tag`
    adds a variant's own definition and what it reads, so adding a variant reuses every
    other's searches and runs.
    (``inputs``: the cell's upstream steps, read by :func:`variant_tag`, not here.)"""
    from gemkd.experiments.run.cache import code_hash, plugin_key, step_sources

    spec_part = {k: v for k, v in spec.to_dict().items()
                 if k not in ("name", "seeds", "variants", "teacher_lag_days", "logger",
                              "primary", "twins", "solaris",
                              "keep_students", "robustness")}
    # which other worlds the run replicates over is not an input of this world's students (its
    # own data is, through the upstream steps' names): adding a world reuses the others' runs
    spec_part["data"] = {k: v for k, v in spec_part["data"].items() if k != "seeds"}
    if spec.tuning.draws == "shared":  # the one draw of earlier versions: their tags, their runs
        spec_part["tuning"] = {k: v for k, v in spec_part["tuning"].items() if k != "draws"}
    blob = json.dumps({"spec": spec_part, "code": code_hash(step_sources("students")),
                       "threads": threads, **plugin_key([spec.student.class_path])},
                      sort_keys=True, default=str)
    return _digest(blob)


def variant_tag(cell_tag: str, spec: RunSpec, variant: VariantSpec, inputs: InputPaths) -> str:
    """The tag of ``variant``'s runs in a cell (its searches' study names and its runs.jsonl
    keys): the cell's :func:`inputs_tag`, the variant's definition, the upstream steps it reads
    (by their names, which carry their config hashes: the teacher source it distils from, the
    GEM store for the teacher's weights, the LoopFM codes) and its methods' plug-in source. The
    baseline reads none, so a new teacher step changes no baseline run."""
    from gemkd.experiments.run.cache import plugin_key

    needs = variant_needs(variant)
    upstream: dict[str, str] = {}
    if needs & {"teacher", "teacher_emb"}:
        upstream[variant.teacher] = fs.name(fs.parent(inputs.stores[variant.teacher]))
    if "teacher_weights" in needs and "gem" in inputs.stores:  # the store names the checkpoint
        upstream["gem"] = fs.name(fs.parent(inputs.stores["gem"]))
    if "codes" in needs and inputs.codes is not None:
        upstream["codes"] = fs.name(fs.parent(inputs.codes))
    if "pairs" in needs and inputs.pairs is not None:  # its name carries solaris's settings
        upstream["pairs"] = fs.name(fs.parent(inputs.pairs))
    blob = json.dumps({"cell": cell_tag, "variant": variant.to_value(), "upstream": upstream,
                       **plugin_key(m.class_path for m in variant.methods)},
                      sort_keys=True, default=str)
    return _digest(blob)


def _digest(blob: str) -> str:
    return hashlib.sha256(blob.encode()).hexdigest()[:12]

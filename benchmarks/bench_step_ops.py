"""What one GEM training step dispatches, and what it achieves: aten ops, GPU kernels, copies,
syncs, ms per step, examples/s and MFU, for GEM ``small`` and ``base`` at B=512.

    python -m benchmarks.bench_step_ops [--json OUT] [--quick] [--threads 1] [--device cpu|cuda]
        [--compile small|base ...]

One step is the fit's (``gemkd teacher fit``): the model's forward, ``RankingModule.loss``,
backward, gradient clipping at norm 1 as Lightning does it (the configs' ``grad_clip``),
``FlatAdamW`` (the trainer's optimizer: tables and dense weights in a group each) and
``zero_grad``, on real batches of the typical synthetic world (bench_teacher's, mean history
50). Counts come from one ``torch.profiler`` trace of one step (benchmarks/step_ops.py: per
phase and per model part, the embedding lookups apart), so they are the same on any machine;
times are medians of interleaved rounds with a dense matmul (fp32 and bf16, the same run): MFU
is the step's matmul FLOP/s (``FlopCounterMode``, forward + backward) over the matmul's.

Targets (the step is launch-bound): GEM base at B=512 dispatches ≤ 3,000 aten ops per step on the
CPU and launches ≤ 300 kernels on a GPU, with no host↔device copy or synchronisation inside the
step.
``--compile NAME`` adds that config's step under ``torch.compile`` (forward and backward; the
optimizer eager) with the seconds of its first calls (one per batch shape: compilation and any
recompiles) in a fresh process twice over one cache folder: cold (an empty cache) and warm (the
FX-graph and AOTAutograd caches that ``compile: true`` keeps, transfer/training/compile_cache.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import teacher_step_timing
from benchmarks.bench_teacher import TYPICAL, model_config
from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    interleaved,
    print_figures,
    write_json,
)
from benchmarks.step_ops import annotate as annotate_parts
from benchmarks.step_ops import count_events, phase, trace
from gemkd.teachers import GEM
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.data.synth import SynthConfig, generate
from gemkd.transfer.training.compile_cache import TORCH_ENV
from gemkd.transfer.training.ranking_module import RankingModule

BATCH = 512
CLIP = 1.0
#: ``[M, K] @ [K, N]`` of the reference matmul: base's widest layer on the CPU; on a GPU one
#: large enough to reach the tensor cores' rate
MM_SHAPES = {"cpu": (512, 1024, 1024), "cuda": (8192, 8192, 8192)}
TARGET_OPS, TARGET_KERNELS = 3000, 300
ROOT = Path(__file__).resolve().parents[1]


class TrainStep:
    """The fit's training step on a fresh, seeded GEM (module doc); returns the loss, unsynced."""

    def __init__(self, schema: DatasetSchema, config: dict, device: str,
                 compile_: bool = False, seed: int = 0):
        torch.manual_seed(seed)
        self.model = GEM.from_config(schema, config).to(device).train()
        self.module = RankingModule(self.model, list(schema.tasks), list(schema.domains),
                                    lr=1e-3, embedding_lr=1e-2).to(device)
        self.opt = self.module.student_optimizer()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.forward = torch.compile(self.model) if compile_ else self.model

    def __call__(self, batch: Batch) -> torch.Tensor:
        with phase("forward"):
            logits = self.forward(batch).logits
        with phase("loss"):
            total, _ = self.module.loss(logits, batch.labels)
        with phase("backward"):
            total.backward()
        with phase("clip"):
            self.module.clip_gradients(self.opt, gradient_clip_val=CLIP,
                                       gradient_clip_algorithm="norm")
        with phase("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return total.detach()


def attach_precision(step: TrainStep) -> None:
    """``LightningModule.clip_gradients`` asks its trainer's precision plugin to clip: a bare
    module gets the plugin a ``32-true`` fit uses."""
    from lightning.pytorch.plugins.precision import Precision

    class _Trainer:  # what clip_gradients reads: no Trainer-level clip settings, the plugin
        gradient_clip_val = gradient_clip_algorithm = None
        precision_plugin = Precision()

    step.module._trainer = _Trainer()  # type: ignore[assignment]


def step_flops(step: TrainStep, batch: Batch) -> int:
    """Matmul/attention FLOPs of one forward + backward (``FlopCounterMode``)."""
    with FlopCounterMode(display=False) as counter:
        step.model(batch).logits.float().sum().backward()
    step.opt.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def matmul(device: str, dtype: torch.dtype) -> tuple[Any, int]:
    m, k, n = MM_SHAPES[device]
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return (lambda: torch.mm(a, b)), 2 * m * k * n


def cycle(step: TrainStep, batches: list[Batch]) -> Any:
    state = {"i": 0}

    def run() -> object:
        state["i"] += 1
        return step(batches[state["i"] % len(batches)])

    return run


def first_calls(name: str, world: Path, n_batches: int, device: str) -> float:
    """Seconds of a fresh compiled step's first call on every batch (compilation included)."""
    batches = teacher_step_timing.read_batches(world, n_batches)
    schema = DatasetReader(world, batch_size=1).schema
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = TrainStep(schema, model_config(name), device, compile_=True)
        t0 = time.perf_counter()
        for b in batches:  # every batch shape once: any recompiles are in the first calls
            step(b)
        if device == "cuda":
            torch.cuda.synchronize()
    return time.perf_counter() - t0


def compile_child(name: str, world: Path, cache: Path, n_batches: int, device: str,
                  threads: int | None) -> float:
    """:func:`first_calls` in a fresh interpreter whose inductor caches live in ``cache``."""
    cmd = [sys.executable, "-m", "benchmarks.bench_step_ops", "--_compile-child", name,
           "--_world", str(world), "--_batches", str(n_batches), "--device", device]
    if threads:
        cmd += ["--threads", str(threads)]
    env = {**os.environ, TORCH_ENV: str(cache)}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"compile child for {name} failed: {out.stderr.strip()[-500:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["first_calls_s"])


def measure(schema: DatasetSchema, batches: list[Batch], device: str, repeats: int,
            names: list[str], compiled: list[str], world: Path, threads: int | None) -> dict:
    steps = {n: TrainStep(schema, model_config(n), device) for n in names}
    out: dict[str, Any] = {"steps": {}, "compile": {}}
    for name in compiled:
        cache = Path(tempfile.mkdtemp(prefix="gemkd_bench_compile_"))
        cold = compile_child(name, world, cache, len(batches), device, threads)
        warm = compile_child(name, world, cache, len(batches), device, threads)
        os.environ[TORCH_ENV] = str(cache)  # this process's compiled step: the warm cache
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            steps[f"{name}+compile"] = step = TrainStep(schema, model_config(name), device,
                                                        compile_=True)
            for b in batches:
                step(b)
        out["compile"][name] = {"cold_first_calls_s": round(cold, 1),
                                "warm_first_calls_s": round(warm, 1),
                                "in_process_warm_s": round(time.perf_counter() - t0, 1)}
    for name, s in steps.items():
        attach_precision(s)
        with annotate_parts(s.model):
            counts = count_events(trace(functools.partial(s, batches[0]), device))
        out["steps"][name] = {"params_m": round(sum(p.numel() for p in s.params) / 1e6, 2),
                              "fwd_bwd_gflop": round(step_flops(s, batches[0]) / 1e9, 3),
                              **counts}
    fns: dict[str, Any] = {name: cycle(s, batches) for name, s in steps.items()}
    mm_flops = {}
    for dt, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        fns[f"mm_{dt}"], mm_flops[dt] = matmul(device, dtype)
    t = interleaved(fns, repeats, device=device)
    out["matmul"] = {dt: {"shape": list(MM_SHAPES[device]),
                          "tflops": round(mm_flops[dt] / t[f"mm_{dt}"] / 1e12, 4)}
                     for dt in mm_flops}
    for name, r in out["steps"].items():
        achieved = r["fwd_bwd_gflop"] * 1e9 / t[name]
        r.update(step_ms=round(t[name] * 1e3, 2), examples_per_s=round(BATCH / t[name]),
                 achieved_tflops=round(achieved / 1e12, 5),
                 mfu_fp32=round(achieved / (mm_flops["fp32"] / t["mm_fp32"]), 4),
                 mfu_bf16=round(achieved / (mm_flops["bf16"] / t["mm_bf16"]), 4))
    return out


def figures(r: dict) -> list[dict]:
    dev, out = r["device"], []
    for name, s in r["steps"].items():
        tag = f"GEM {name} step, B={BATCH} ({dev})"
        emb = s["by_part"].get("embeddings", 0) + s["by_part"].get("embeddings.backward", 0)
        target = f"<= {TARGET_OPS}" if name == "base" else None
        out.append(figure(f"{tag}: aten ops dispatched", s["aten_ops"], "ops", target,
                          f"{s['top_level']} top-level; embedding lookups {emb}"))
        out.append(figure(f"{tag}: aten ops besides the embedding lookups",
                          s["aten_ops"] - emb, "ops"))
        emb_k = (s["kernel_like_by_part"].get("embeddings", 0)
                 + s["kernel_like_by_part"].get("embeddings.backward", 0))
        clip = s["kernel_like_by_phase"].get("clip", 0)
        out.append(figure(f"{tag}: kernel-like aten ops (the CPU's estimate of GPU kernels)",
                          s["kernel_like"], "ops", None,
                          f"embedding lookups {emb_k}; clipping {clip} (one kernel per tensor "
                          "on the CPU, foreach on a GPU)"))
        out.append(figure(f"{tag}: tensor values read on the host (.item(), int(t), ...)",
                          s["host_reads"], "", "<= 0"))
        if "kernels" in s:
            out.append(figure(f"{tag}: GPU kernels launched", s["kernels"], "kernels",
                              f"<= {TARGET_KERNELS}" if name == "base" else None))
            out.append(figure(f"{tag}: host↔device copies + synchronisations",
                              s["h2d"] + s["d2h"] + s["syncs"], "", "<= 0"))
        out.append(figure(f"{tag}: time", s["step_ms"], "ms"))
        out.append(figure(f"{tag}: examples/s", s["examples_per_s"], "examples/s"))
        for dt in ("fp32", "bf16"):
            out.append(figure(f"{tag}: MFU against a {dt} matmul of the same run",
                              s[f"mfu_{dt}"] * 100, "%"))
    for name, c in r["compile"].items():
        for kind in ("cold", "warm"):
            out.append(figure(f"GEM {name}: torch.compile's first calls on {r['n_batches']} "
                              f"batches, {kind} cache ({dev})", c[f"{kind}_first_calls_s"], "s"))
    return out


def report(r: dict) -> None:
    mm = r["matmul"]
    print(f"GEM training step (forward, loss, backward, clip, FlatAdamW), B={BATCH}, "
          f"{r['device']}, {r['threads']} threads; matmul fp32 {mm['fp32']['tflops']:.3f} "
          f"TFLOP/s, bf16 {mm['bf16']['tflops']:.3f} TFLOP/s")
    for name, s in r["steps"].items():
        gpu = (f", {s['kernels']} kernels, {s['h2d']} h2d / {s['d2h']} d2h copies, "
               f"{s['syncs']} syncs" if "kernels" in s else "")
        print(f"{name}: {s['aten_ops']:,} aten ops ({s['top_level']} top-level, "
              f"{s['kernel_like']} kernel-like){gpu}; "
              f"{s['step_ms']:.1f} ms, {s['examples_per_s']:,} ex/s, MFU {s['mfu_fp32']:.2%} "
              f"(fp32) / {s['mfu_bf16']:.2%} (bf16)")
        print(f"  by phase: {s['by_phase']}")
        print(f"  by part:  {s['by_part']}")
        print(f"  kernel-like by phase: {s['kernel_like_by_phase']}")
        print(f"  kernel-like by part:  {s['kernel_like_by_part']}")
        print(f"  top-level ops: {s['top_ops']}")
    for name, c in r["compile"].items():
        print(f"torch.compile ({name}): first calls on {r['n_batches']} batches "
              f"{c['cold_first_calls_s']} s with an empty cache, {c['warm_first_calls_s']} s "
              "with the cache a compile: true fit keeps (fresh processes)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, device=True)
    p.add_argument("--compile", action="append", default=[], choices=["small", "base"],
                   help="also this config's step under torch.compile (needs a C++ compiler on "
                        "the CPU); repeatable")
    p.add_argument("--_compile-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_world", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_batches", type=int, default=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    apply_common_args(p, args)
    teacher_step_timing.DEVICE = args.device
    if args._compile_child:
        seconds = first_calls(args._compile_child, Path(args._world), args._batches, args.device)
        print(json.dumps({"first_calls_s": seconds}))
        return
    names = ["small"] if args.quick else ["small", "base"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        world = {**TYPICAL, "examples_per_day": 1024} if args.quick else TYPICAL
        root = Path(tmp) / "typical"
        schema = generate(SynthConfig(**world), root)
        batches = teacher_step_timing.read_batches(root, 2 if args.quick else 4)
        lengths = torch.cat([b.seq_lengths for b in batches]).float()
        r: dict[str, Any] = {"bench": "step_ops", "quick": args.quick, "device": args.device,
                             "batch_size": BATCH, "repeats": args.repeats,
                             "threads": torch.get_num_threads(), "n_batches": len(batches),
                             "mean_history": round(lengths.mean().item(), 1)}
        r.update(measure(schema, batches, args.device, args.repeats, names, args.compile, root,
                         args.threads))
    r["total_seconds"] = round(time.perf_counter() - t0, 1)
    report(r)
    r["figures"] = figures(r)
    print_figures(r["figures"])
    write_json(args.json, r)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()

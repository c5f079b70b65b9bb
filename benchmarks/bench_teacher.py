"""GEM teacher benchmark: training-step rate, torch.compile, history-length scaling, memory, FLOPs.

    python -m benchmarks.bench_teacher [--json OUT] [--quick] [--device cpu|cuda]

One training step = GEM forward + per-task BCE + backward + AdamW step (the trainer's two
parameter groups) on real ``Batch`` objects (B = 512) read by ``DatasetReader`` from synthetic
worlds generated in a temporary folder:

* ``typical`` world: mean history 50, log-normal tail (the quickstart's distribution), read
  with no truncation; used for the ``small``/``base`` rates, eager vs ``torch.compile``, FLOPs
  and memory.
* ``long`` world: every user is very active (mean history 6000, low spread) so, read with
  ``max_seq_len = cap``, the histories sit at the cap (``at_cap`` in the output gives the share;
  the rest are within a few percent of it); used for the scaling of time per example as the
  model's ``max_history`` and the reader's ``max_seq_len`` go 128 → 4096 (``small`` otherwise).

Timings that are compared are taken side by side: interleaved rounds (each candidate once per
round) after a warm-up, medians. Targets (issue): pyramid step time at 4096 events <= 3x the time
at 128 (32x longer histories); one epoch of the small world's 200k training examples with the
small GEM in <= 3 min (extrapolated from the step rate). ``--device cuda`` runs the models on the
GPU (memory then is ``torch.cuda.max_memory_allocated`` growth, in process).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from benchmarks import teacher_step_timing
from benchmarks.common import figure, interleaved, print_figures, sync, write_json
from benchmarks.teacher_step_timing import (
    BATCH,
    MM_FLOPS,
    MM_SHAPE,
    Step,
    cycler,
    matmul_fn,
    read_batches,
    step_flops,
)
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.synth import SynthConfig, generate

ROOT = Path(__file__).resolve().parents[1]
CAPS = [128, 256, 512, 1024, 2048, 4096]
SMALL_WORLD_TRAIN = 200_000  # examples on the small world's teacher training days [0, 10)
DEVICE = "cpu"  # set from --device in main()
TYPICAL: dict[str, Any] = dict(
    n_days=2, examples_per_day=2048, n_users=2000, n_ads=300, n_advertisers=40, n_content=600,
    n_topics=16, history_days=20, mean_history=50.0, max_history=4096)
LONG: dict[str, Any] = dict(
    n_days=1, examples_per_day=1536, n_users=600, n_ads=300, n_advertisers=40, n_content=600,
    n_topics=16, history_days=20, mean_history=6000.0, history_sigma=0.25, max_history=4096)


def model_config(name: str, **overrides) -> dict:
    cfg = yaml.safe_load((ROOT / "experiments/teacher/configs" / f"{name}.yaml").read_text())
    return {**cfg["model"], **overrides}


# ---------------------------------------------------------------------------- memory (child)
def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def memory_child(data: str, config_json: str, max_seq_len: int | None, steps: int) -> None:
    """Runs in a fresh interpreter: peak RSS growth during ``steps`` training steps."""
    reader_batches = read_batches(Path(data), 1, max_seq_len)
    batch = reader_batches[0]
    schema = DatasetReader(Path(data), batch_size=1).schema
    step = Step(schema, json.loads(config_json))
    del reader_batches
    base = _rss_kib("VmRSS")
    try:  # reset the high-water mark (Linux >= 4.0); else fall back to the process peak
        Path("/proc/self/clear_refs").write_text("5")
        how = "VmHWM after reset"
    except OSError:
        how = "ru_maxrss (process peak)"
    for _ in range(steps):
        step(batch)
    peak = _rss_kib("VmHWM") if how.startswith("VmHWM") else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rss_before_mib": base / 1024, "peak_delta_mib": (peak - base) / 1024,
                      "how": how}))


def cuda_memory(data: Path, config: dict, max_seq_len: int | None, steps: int = 3) -> dict:
    """On the GPU: growth of ``max_memory_allocated`` over ``steps`` steps, in process."""
    batch = read_batches(data, 1, max_seq_len)[0]
    step = Step(DatasetReader(data, batch_size=1).schema, config)
    sync(DEVICE)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        step(batch)
    sync(DEVICE)
    peak = torch.cuda.max_memory_allocated()
    del step, batch
    torch.cuda.empty_cache()
    return {"rss_before_mib": base / 2**20, "peak_delta_mib": (peak - base) / 2**20,
            "how": "torch.cuda.max_memory_allocated growth"}


def memory(data: Path, config: dict, max_seq_len: int | None, threads: int | None,
           steps: int = 3) -> dict:
    if DEVICE == "cuda":
        return cuda_memory(data, config, max_seq_len, steps)
    cmd = [sys.executable, "-m", "benchmarks.bench_teacher", "--_memory", str(data),
           "--_config", json.dumps(config),
           "--_steps", str(steps)]
    if threads:
        cmd += ["--threads", str(threads)]
    if max_seq_len is not None:
        cmd += ["--_max-seq-len", str(max_seq_len)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="fewer repeats, no compile, fewer caps")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: "
                   "torch's); 1 is steadier on a machine shared with other jobs")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--only", choices=["eager", "compile", "scaling", "memory"], action="append",
                   help="run only these sections (repeatable)")
    p.add_argument("--_memory", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_config", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_max-seq-len", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_steps", type=int, default=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    global DEVICE
    DEVICE = teacher_step_timing.DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    if args.repeats is not None and args.repeats < 5:
        p.error("--repeats must be at least 5")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args._memory:
        memory_child(args._memory, args._config, args._max_seq_len, args._steps)
        return

    quick = args.quick
    results_threads = torch.get_num_threads()
    only = set(args.only or ["eager", "compile", "scaling", "memory"])
    repeats = args.repeats or (5 if quick else 7)
    caps = [128, 512, 4096] if quick else CAPS
    results: dict = {"bench": "teacher", "quick": quick, "device": DEVICE, "batch_size": BATCH,
                     "repeats": repeats, "threads": results_threads, "notes": []}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        typical_dir, long_dir = Path(tmp) / "typical", Path(tmp) / "long"
        t0 = time.perf_counter()
        schema = generate(SynthConfig(**TYPICAL), typical_dir)
        long_cfg = {**LONG, "examples_per_day": 512 if quick else LONG["examples_per_day"]}
        long_schema = generate(SynthConfig(**long_cfg), long_dir)
        gen_s = time.perf_counter() - t0
        batches = read_batches(typical_dir, 2 if quick else 4)
        lengths = torch.cat([b.seq_lengths for b in batches]).float()
        results["typical_batches"] = {
            "n": len(batches), "mean_history": round(lengths.mean().item(), 1),
            "max_history": int(lengths.max()), "generate_seconds": round(gen_s, 1),
        }

        # -- 1. small vs base, eager; dense matmul in the same rounds ----------------------
        if "eager" in only:
            results.update(eager_section(schema, batches, repeats))

        # -- 2. eager vs torch.compile (small) ----------------------------------------------
        if "compile" in only:
            if quick or args.no_compile:
                results["compile"] = {"skipped": "--quick" if quick else "--no-compile"}
            else:
                results["compile"] = compile_section(schema, batches, repeats)

        # -- 3. history-length scaling (small; model max_history = reader max_seq_len) --------
        if "scaling" in only:
            results["scaling"] = scaling_section(long_schema, long_dir, caps, repeats)

        # -- 4. peak memory (fresh interpreter each) ----------------------------------------
        if "memory" in only:
            mem = {"small": memory(typical_dir, model_config("small"), None, args.threads)}
            if not quick:
                mem["base"] = memory(typical_dir, model_config("base"), None, args.threads)
            mem[f"small@{caps[-1]}"] = memory(
                long_dir, model_config("small", max_history=caps[-1]), caps[-1], args.threads
            )
            results["memory"] = mem
    results["total_seconds"] = round(time.perf_counter() - t_start, 1)
    report(results)
    results["figures"] = figures(results)
    print_figures(results["figures"])
    write_json(args.json, results)


def figures(r: dict) -> list[dict]:
    """The table rows: rates, matmul share, compile speedup, scaling, memory."""
    dev, out = r["device"], []
    hist = r["typical_batches"]["mean_history"]
    for name, e in r.get("eager", {}).items():
        out.append(figure(f"GEM {name} training step, B={BATCH}, mean history {hist} ({dev})",
                          e["examples_per_s"], "examples/s"))
        out.append(figure(f"GEM {name}: achieved matmul GFLOP/s ÷ dense fp32 mm ({dev})",
                          e["share_of_matmul"] * 100, "%"))
    if "small" in r.get("eager", {}):
        out.append(figure(f"GEM small: one epoch of the small world ({SMALL_WORLD_TRAIN:,} "
                          f"examples), extrapolated ({dev})",
                          SMALL_WORLD_TRAIN / r["eager"]["small"]["examples_per_s"], "s",
                          "<= 180"))
    c = r.get("compile", {})
    if "speedup" in c:
        out.append(figure(f"GEM small: torch.compile ÷ eager speed ({dev})", c["speedup"]))
    s = r.get("scaling")
    if s:
        caps = list(s["caps"])
        out.append(figure(f"GEM small step time, history {caps[-1]} ÷ {caps[0]} events ({dev})",
                          s["ratio_last_first"], "x", "<= 3"))
    for name, m in r.get("memory", {}).items():
        if "peak_delta_mib" in m:
            out.append(figure(f"GEM {name}: peak memory growth over 3 training steps ({dev})",
                              m["peak_delta_mib"], "MiB"))
    return out


def eager_section(schema, batches: list[Batch], repeats: int) -> dict:
    """``small`` and ``base`` eager, with a dense matmul timed in the same rounds."""
    steps = {name: Step(schema, model_config(name)) for name in ("small", "base")}
    fns = {name: cycler(s, batches) for name, s in steps.items()}
    fns["mm"] = matmul_fn()
    t = interleaved(fns, repeats, device=DEVICE)
    mm_gflops = MM_FLOPS / t["mm"] / 1e9
    eager = {}
    for name, s in steps.items():
        flops = step_flops(s, batches[0])
        achieved = flops / t[name] / 1e9
        eager[name] = {
            "params_m": round(s.model.num_parameters() / 1e6, 2),
            "step_ms": round(t[name] * 1e3, 1),
            "examples_per_s": round(BATCH / t[name]),
            "fwd_bwd_gflop": round(flops / 1e9, 2),
            "achieved_gflops": round(achieved, 2),
            "share_of_matmul": round(achieved / mm_gflops, 3),
        }
    return {"matmul": {"shape": list(MM_SHAPE), "gflops": round(mm_gflops, 1)}, "eager": eager}


def compile_section(schema, batches: list[Batch], repeats: int) -> dict:
    eager = Step(schema, model_config("small"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = Step(schema, model_config("small"), compile_=True)
            t0 = time.perf_counter()
            for b in batches:  # every distinct batch shape once: includes any recompiles
                compiled(b)
            compile_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - report, don't crash the benchmark
        return {"skipped": f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}"}
    t = interleaved({"eager": cycler(eager, batches), "compiled": cycler(compiled, batches)},
                    repeats, device=DEVICE)
    return {
        "compile_seconds": round(compile_s, 1),
        "eager_examples_per_s": round(BATCH / t["eager"]),
        "compiled_examples_per_s": round(BATCH / t["compiled"]),
        "speedup": round(t["eager"] / t["compiled"], 2),
    }


def scaling_section(schema, root: Path, caps: list[int], repeats: int) -> dict:
    fns: dict[str, Callable[[], object]] = {}
    info = {}
    for cap in caps:
        b = read_batches(root, 1, max_seq_len=cap)[0]
        lengths = b.seq_lengths
        step = Step(schema, model_config("small", max_history=cap))
        fns[str(cap)] = cycler(step, [b])
        info[cap] = {
            "mean_history": round(lengths.float().mean().item(), 1),
            "at_cap": round((lengths == cap).float().mean().item(), 3),
            "tokens": step.model.pyramid.n_tokens(cap),
        }
    t = interleaved(fns, repeats, device=DEVICE)
    rows = {}
    for cap in caps:
        s = t[str(cap)]
        rows[str(cap)] = {**info[cap], "step_ms": round(s * 1e3, 1),
                          "us_per_example": round(s / BATCH * 1e6, 1),
                          "vs_first": round(s / t[str(caps[0])], 2)}
    ratio = t[str(caps[-1])] / t[str(caps[0])]
    return {"caps": rows, "ratio_last_first": round(ratio, 2),
            "target": f"<= 3x for {caps[-1] // caps[0]}x longer histories",
            "meets_target": bool(ratio <= 3.0)}


def report(r: dict) -> None:
    tb = r["typical_batches"]
    print(f"GEM teacher training step (fwd+bwd+AdamW), B={r['batch_size']}, "
          f"{r['threads']} threads, medians of {r['repeats']} interleaved rounds")
    print(f"typical batches: mean history {tb['mean_history']}, max {tb['max_history']}")
    if "eager" in r:
        report_eager(r)
    if "compile" in r:
        c = r["compile"]
        if "skipped" in c:
            print(f"torch.compile (small): skipped ({c['skipped']})")
        else:
            print(f"torch.compile (small): {c['compiled_examples_per_s']:,} ex/s vs eager "
                  f"{c['eager_examples_per_s']:,} ex/s = {c['speedup']:.2f}x "
                  f"(compile {c['compile_seconds']:.1f} s, excluded)")
    if "scaling" in r:
        report_scaling(r["scaling"])
    if "memory" in r:
        report_memory(r["memory"])
    print(f"total {r['total_seconds']:.0f} s")


def report_eager(r: dict) -> None:
    mm = r["matmul"]
    print(f"dense fp32 mm {mm['shape'][0]}x{mm['shape'][1]}x{mm['shape'][2]}: "
          f"{mm['gflops']:.1f} GFLOP/s (same rounds as the eager rates)")
    print(f"{'config':<8} {'params':>8} {'step ms':>9} {'ex/s':>8} {'GFLOP/step':>11} "
          f"{'GFLOP/s':>8} {'of mm':>6}")
    for name, e in r["eager"].items():
        print(f"{name:<8} {e['params_m']:>7.2f}M {e['step_ms']:>9.1f} {e['examples_per_s']:>8,} "
              f"{e['fwd_bwd_gflop']:>11.2f} {e['achieved_gflops']:>8.2f} "
              f"{e['share_of_matmul']:>6.1%}")


def report_scaling(s: dict) -> None:
    print("history-length scaling (small, histories at the cap):")
    print(f"{'cap':>6} {'mean len':>9} {'at cap':>7} {'tokens':>7} {'step ms':>9} "
          f"{'us/ex':>7} {'vs first':>9}")
    for cap, row in s["caps"].items():
        print(f"{cap:>6} {row['mean_history']:>9.1f} {row['at_cap']:>7.1%} {row['tokens']:>7} "
              f"{row['step_ms']:>9.1f} {row['us_per_example']:>7.1f} {row['vs_first']:>8.2f}x")
    print(f"ratio {s['ratio_last_first']:.2f}x ({s['target']}: "
          f"{'met' if s['meets_target'] else 'NOT met'})")


def report_memory(mem: dict) -> None:
    print("peak memory: RSS high-water growth over 3 training steps in a fresh process, over "
          "its RSS after loading the batch and building the model (weights, grads, AdamW state, "
          "activations, allocator caching)")
    for name, m in mem.items():
        if "error" in m:
            print(f"  {name:<12} error: {m['error']}")
        else:
            print(f"  {name:<12} +{m['peak_delta_mib']:.0f} MiB (process at "
                  f"{m['rss_before_mib']:.0f} MiB before; {m['how']})")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()

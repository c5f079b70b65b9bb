"""Jagged pooling vs pad-to-max-and-mask: time and peak memory (DESIGN §7).

A batch of B=512 user histories with heavy-tailed lengths (lognormal, mean ~100, one sequence of
the maximum 4000: the realistic case where one power user sets the padded width), D=64 float32
event embeddings. Two poolings, forward + backward (gradients to the event embeddings and the
query):

- ``segment_mean``: jagged ``gemkd.transfer.ops.segment_mean`` vs ``jagged_to_padded`` to the batch
max
  then a masked mean;
- ``target_attention``: jagged ``gemkd.transfer.ops.jagged_target_attention`` vs padding the events
  (keys = values, padded once, DIN-style) then masked softmax attention.

The padded variants pad on the device with ``gemkd.transfer.ops.jagged_to_padded`` (kernel "auto"),
as a model would, so padding is part of their cost. Time: median of ``--reps`` runs after
``--warmup`` runs. Memory:

- CUDA: ``torch.cuda.max_memory_allocated`` minus what was allocated before the run (exact, the
  caching allocator's view of live tensors);
- CPU: the peak resident-set growth of a fresh subprocess per variant during one forward +
  backward (``/proc/self/clear_refs`` resets the high-water mark after the inputs are built;
  ``VmHWM - VmRSS``). It counts every page the run touches (tensors, allocator slack, thread
  arenas), so small figures carry a few MB of noise.

CPU runs are single-threaded by default (``--threads``): on a shared machine whose cores are busy,
multi-threaded torch ops stall in OpenMP barriers and the timings measure the neighbours.

On CUDA the jagged variants run with both kernels ("torch" and "triton"). ``--quick``: B=64,
mean 50, max 500 (a smoke run, not the reference figures). Usage::

    python -m benchmarks.bench_jagged [--json OUT] [--device cpu|cuda] [--quick]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import figure, print_figures, write_json
from gemkd.transfer import ops

REPO = Path(__file__).resolve().parents[1]
OPS = ("segment_mean", "target_attention")


def make_inputs(b: int, d: int, mean_len: float, max_len: int, seed: int, device: str) -> dict:
    """Heavy-tailed lengths (lognormal with the given mean, sigma 1, clipped; one of max_len)."""
    g = torch.Generator().manual_seed(seed)
    sigma = 1.0
    lengths = torch.empty(b).log_normal_(math.log(mean_len) - sigma**2 / 2, sigma, generator=g)
    lengths = lengths.round().clamp(0, max_len).long()
    lengths[0] = max_len
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    n = int(offsets[-1])
    return {
        "offsets": offsets.to(device),
        "events": torch.randn(n, d, generator=g).to(device).requires_grad_(),
        "query": torch.randn(b, d, generator=g).to(device).requires_grad_(),
        "grad": torch.randn(b, d, generator=g).to(device),
        "max_len": int(lengths.max()),
        "n": n,
    }


def forward(op: str, variant: str, kernel: str, x: dict) -> torch.Tensor:
    """One pooling; ``variant`` is "jagged" or "padded"."""
    events, offsets, query, max_len = x["events"], x["offsets"], x["query"], x["max_len"]
    if variant == "jagged":
        if op == "segment_mean":
            return ops.segment_mean(events, offsets, kernel=kernel)
        return ops.jagged_target_attention(query, events, events, offsets, kernel=kernel)
    padded = ops.jagged_to_padded(events, offsets, max_len)  # [B, L, D]
    mask = ops.lengths_to_mask(offsets, max_len)  # [B, L]
    if op == "segment_mean":
        total = (padded * mask.unsqueeze(-1)).sum(1)
        return total / mask.sum(1, keepdim=True).clamp_min(1)
    scores = torch.einsum("bd,bld->bl", query, padded) / math.sqrt(events.shape[1])
    weights = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=1)
    weights = torch.nan_to_num(weights, nan=0.0)  # empty sequences: all -inf -> NaN -> 0
    return torch.einsum("bl,bld->bd", weights, padded)


def step(op: str, variant: str, kernel: str, x: dict) -> None:
    x["events"].grad = x["query"].grad = None
    forward(op, variant, kernel, x).backward(x["grad"])


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_ms(op: str, variant: str, kernel: str, x: dict, reps: int, warmup: int, device: str):
    for _ in range(warmup):
        step(op, variant, kernel, x)
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        step(op, variant, kernel, x)
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def cuda_peak_bytes(op: str, variant: str, kernel: str, x: dict) -> int:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(op, variant, kernel, x)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _proc_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_cpu_memory_here(op: str, variant: str, args: argparse.Namespace) -> int:
    """Run inside the fresh subprocess: peak RSS growth (bytes) of one forward + backward."""
    torch.set_num_threads(args.threads)
    tiny = make_inputs(4, args.d, 4, 8, args.seed, "cpu")
    step(op, variant, "torch", tiny)  # initialise thread pools and lazy modules, on ~nothing
    x = make_inputs(args.b, args.d, args.mean_len, args.max_len, args.seed, "cpu")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _proc_kb("VmRSS")
    step(op, variant, "torch", x)
    return (_proc_kb("VmHWM") - before) * 1024


def cpu_peak_bytes(op: str, variant: str, args: argparse.Namespace) -> int:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bench_jagged",
        "--_memory-child",
        op,
        variant,
        "--b",
        str(args.b),
        "--d",
        str(args.d),
        "--mean-len",
        str(args.mean_len),
        "--max-len",
        str(args.max_len),
        "--seed",
        str(args.seed),
        "--threads",
        str(args.threads),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"memory measurement of {op}/{variant} failed:\n{out.stderr[-3000:]}")
    return int(out.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> dict:
    device = args.device
    torch.set_num_threads(args.threads)
    x = make_inputs(args.b, args.d, args.mean_len, args.max_len, args.seed, device)
    kernels = ["torch", "triton"] if device == "cuda" and ops.triton_available() else ["torch"]
    rows = []
    for op in OPS:
        variants = [("jagged", k) for k in kernels] + [("padded", "auto")]
        for variant, kernel in variants:
            ms, best = time_ms(op, variant, kernel, x, args.reps, args.warmup, device)
            if device == "cuda":
                peak = cuda_peak_bytes(op, variant, kernel, x)
            else:
                peak = cpu_peak_bytes(op, variant, args)
            rows.append(
                {
                    "op": op,
                    "variant": variant,
                    "kernel": kernel,
                    "median_ms": ms,
                    "min_ms": best,
                    "peak_bytes": peak,
                }
            )
    ratios = {}
    for op in OPS:
        by = {(r["variant"], r["kernel"]): r for r in rows if r["op"] == op}
        padded = by[("padded", "auto")]
        for kernel in kernels:
            jag = by[("jagged", kernel)]
            ratios[f"{op}/{kernel}"] = {
                "time_padded_over_jagged": padded["median_ms"] / jag["median_ms"],
                "memory_padded_over_jagged": padded["peak_bytes"] / max(jag["peak_bytes"], 1),
            }
    elt = x["events"].element_size()
    return {
        "device": device,
        "torch": torch.__version__,
        "config": {
            "B": args.b,
            "D": args.d,
            "N": x["n"],
            "mean_len": x["n"] / args.b,
            "max_len": x["max_len"],
            "seed": args.seed,
            "reps": args.reps,
            "warmup": args.warmup,
            "threads": args.threads,
            "dtype": "float32",
            "padded_tensor_bytes": args.b * x["max_len"] * args.d * elt,
            "jagged_values_bytes": x["n"] * args.d * elt,
        },
        "memory_measure": (
            "torch.cuda.max_memory_allocated growth during one fwd+bwd"
            if device == "cuda"
            else "peak RSS growth (VmHWM - VmRSS) of a fresh subprocess during one fwd+bwd"
        ),
        "results": rows,
        "ratios": ratios,
    }


def print_report(rep: dict) -> None:
    c = rep["config"]
    print(
        f"device={rep['device']} B={c['B']} D={c['D']} N={c['N']} mean_len={c['mean_len']:.1f} "
        f"max_len={c['max_len']} | fwd+bwd, median of {c['reps']} after {c['warmup']} warm-up"
    )
    print(
        f"padded [B, max_len, D] tensor: {c['padded_tensor_bytes'] / 2**20:.0f} MiB; "
        f"jagged values: {c['jagged_values_bytes'] / 2**20:.1f} MiB"
    )
    print(f"memory: {rep['memory_measure']}")
    print(f"{'op':<18}{'variant':<9}{'kernel':<8}{'median ms':>11}{'min ms':>9}{'peak MiB':>10}")
    for r in rep["results"]:
        print(
            f"{r['op']:<18}{r['variant']:<9}{r['kernel']:<8}{r['median_ms']:>11.2f}"
            f"{r['min_ms']:>9.2f}{r['peak_bytes'] / 2**20:>10.1f}"
        )
    print("padded / jagged:")
    for key, v in rep["ratios"].items():
        print(
            f"  {key:<26} time x{v['time_padded_over_jagged']:.1f}"
            f"   memory x{v['memory_padded_over_jagged']:.1f}"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true", help="B=64, mean 50, max 500")
    p.add_argument("--b", type=int, default=512)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--mean-len", type=float, default=100.0)
    p.add_argument("--max-len", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", "--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: on a shared, loaded machine a 2-thread run stalls "
        "in OpenMP barriers and times noise, not the op)",
    )
    p.add_argument("--_memory-child", nargs=2, metavar=("OP", "VARIANT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._memory_child:
        op, variant = args._memory_child
        print(measure_cpu_memory_here(op, variant, args))
        return
    if args.reps < 5:
        p.error("--reps must be at least 5")
    if args.quick:
        args.b, args.mean_len, args.max_len = 64, 50.0, 500
    t0 = time.perf_counter()
    rep = run(args)
    rep["total_seconds"] = round(time.perf_counter() - t0, 1)
    print_report(rep)
    rep["figures"] = figures(rep)
    print_figures(rep["figures"])
    write_json(args.json, {"bench": "jagged", "quick": args.quick, **rep})


def figures(rep: dict) -> list[dict]:
    """Padded ÷ jagged time and memory for each op and kernel (no targets: context)."""
    c = rep["config"]
    where = f"B={c['B']}, D={c['D']}, mean {c['mean_len']:.0f}, max {c['max_len']}"
    out = []
    for key, v in rep["ratios"].items():
        op, kernel = key.split("/")
        for what, k in (("time", "time_padded_over_jagged"),
                        ("peak memory", "memory_padded_over_jagged")):
            out.append(figure(f"{op} fwd+bwd, padded ÷ jagged {what} ({rep['device']}, "
                              f"{kernel} kernel; {where})", v[k]))
    return out


if __name__ == "__main__":
    main()

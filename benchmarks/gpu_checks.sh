#!/usr/bin/env bash
# The GPU-only checks as one prepared script, for a lent CUDA machine (see README, Benchmarks):
# the gpu-marked tests (Triton kernels vs the PyTorch reference at realistic sizes, GEM with
# Triton vs reference ops, teacher fit/export on CUDA), then the benchmarks with Triton on.
# Usage: OUT=dir bash benchmarks/gpu_checks.sh [--ablation]   (writes OUT/gpu_checks.tar.gz)
set -u
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT/r"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
log() { echo "== $(date +%T) $*"; }
{
  log "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, triton, lightning, pyarrow; print('torch', torch.__version__, 'triton', triton.__version__, 'lightning', lightning.__version__, 'pyarrow', pyarrow.__version__)"
  log "gpu tests"
  timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests/ops/test_jagged_gpu.py \
    tests/teachers/test_gem_gpu.py tests/training/test_gpu_fit.py
  echo "gpu tests exit $?"
  log "bench_jagged (torch and triton kernels)"
  timeout 90 $PY benchmarks/bench_jagged.py --device cuda --json "$OUT/r/jagged.json"
  log "bench_transfer"
  timeout 120 $PY benchmarks/bench_transfer.py --device cuda --json "$OUT/r/transfer.json"
  if [ "${1:-}" = "--ablation" ]; then
    log "teacher ablation (small, 3 seeds)"
    timeout 420 $PY benchmarks/teacher_ablation.py --accelerator gpu --seeds 0 1 2 \
      --json "$OUT/r/ablation_small_gpu.json"
  fi
  log "done"
} 2>&1 | tee "$OUT/r/gpu_checks.log"
tar -czf "$OUT/gpu_checks.tar.gz" -C "$OUT" r

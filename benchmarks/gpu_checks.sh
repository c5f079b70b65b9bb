#!/usr/bin/env bash
# The GPU-only checks as one prepared script, for a lent CUDA machine (see docs/results/README.md):
# the gpu-marked tests (Triton kernels vs the PyTorch reference at realistic sizes, GEM with
# Triton vs reference ops, teacher fit/export on CUDA), then the benchmarks with Triton on.
# Usage: OUT=dir bash benchmarks/gpu_checks.sh [--ablation | --size]   (writes OUT/gpu_checks.tar.gz)
# --size: GEM base against GEM small at equal data (docs/results/TEACHER.md): one pass
# over the benchmark world's 30-day window of every domain, each at its own recipe, 2 seeds,
# paired on the evaluation days 33-34 (~12 min on an H200: generation ~2 min, base ~3 min a fit)
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
  timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests/transfer/ops/test_jagged_gpu.py \
    tests/teachers/gem/test_gem_gpu.py tests/transfer/training/test_gpu_fit.py
  echo "gpu tests exit $?"
  log "bench_jagged (torch and triton kernels)"
  timeout 90 $PY -m benchmarks.bench_jagged --device cuda --json "$OUT/r/jagged.json"
  log "bench_step_ops (kernels, copies, syncs and MFU of a GEM small/base step at B=512)"
  timeout 150 $PY -m benchmarks.bench_step_ops --device cuda --json "$OUT/r/step_ops.json"
  log "bench_transfer"
  timeout 120 $PY -m benchmarks.bench_transfer --device cuda --json "$OUT/r/transfer.json"
  if [ "${1:-}" = "--ablation" ]; then
    log "teacher ablation (small, 3 seeds)"
    timeout 420 $PY -m studies.teacher_ablation --accelerator gpu --seeds 0 1 2 \
      --json "$OUT/r/ablation_small_gpu.json"
  fi
  if [ "${1:-}" = "--size" ]; then
    log "GEM base vs small at equal data: the 35-day base world, window [3, 33)"
    sed 's/^n_days: .*/n_days: 35/' experiments/data/base.yaml > "$OUT/base35.yaml"
    timeout 300 $PY -m gemkd.experiments.cli data synth --config "$OUT/base35.yaml" \
      --out "$OUT/base35" --overwrite
    timeout 900 $PY -m studies.teacher_aging --data "$OUT/base35" --window 30 --ages 0 \
      --eval-days 33 35 --seeds 0 1 --models gem gem_base --control gem --accelerator gpu \
      --set max_seq_len=256 max_epochs=1 --groups all stories --task click --bootstrap 200 \
      --json "$OUT/r/teacher_size_gpu.json" --markdown "$OUT/r/teacher_size_gpu.md"
    echo "teacher size exit $?"
  fi
  log "done"
} 2>&1 | tee "$OUT/r/gpu_checks.log"
tar -czf "$OUT/gpu_checks.tar.gz" -C "$OUT" r

#!/usr/bin/env bash
# The transfer-scaling study at the benchmark's size (studies/scaling_large.yaml: 8 worlds x 3
# seeds, teachers of 1 to 32 days of every domain) on a GPU machine: the teachers' streams run
# on the GPU (the teacher configs' accelerator is auto, precision bf16-mixed on CUDA), the
# student runs on the CPU cores in WORKERS processes. Writes runs/scaling_large/d<D>/ and
# docs/results/SCALING_LARGE.md with its plots; cached, so a rerun after an interruption resumes
# and a finished study only reports.
# Not timed yet; the 2-core run of studies/scaling.yaml (half the world, 4 worlds x 3 seeds, 1 to
# 16 days) is in docs/notes/2026-12-06-scaling.md.
#
#   make install TORCH_INDEX=     # once: PyPI's CUDA build of torch
#   WORKERS=12 bash studies/scaling_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: studies/scaling_gpu.sh: no CUDA device visible to .venv's torch" \
         "(make install TORCH_INDEX= first)" >&2
    exit 2
fi
make scaling SCALING_CONFIG=studies/scaling_large.yaml SCALING_ARGS="--workers ${WORKERS:-12}"

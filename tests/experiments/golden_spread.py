"""How far the golden run's numbers move between CPU kernels: the spread the golden test's
tolerance is derived from.

A machine with another CPU takes other vector kernels (ATen's dispatch by CPU capability) and
other BLAS code paths (MKL's by instruction set, oneDNN's by ISA), which sum in another order.
This reruns the golden spec under each of those settings on one machine and prints, per column,
the largest relative difference from the default run::

    .venv/bin/python -m tests.experiments.golden_spread --out /tmp/golden_spread
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from tests.experiments.test_golden import SPEC, TIMING

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "mkl_avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "MKL_CBWR": "AVX2"},
    "mkl_compatible": {"MKL_CBWR": "COMPATIBLE"},
    "onednn_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "all_avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2",
                 "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def _run(name: str, env: dict[str, str], out: Path) -> pd.DataFrame:
    spec = out / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    run = out / name
    if not (run / "results.csv").is_file():
        subprocess.run([sys.executable, "-m", "gemkd.experiments.cli", "run", str(spec),
                        "--out", str(run), "--threads", "1"],
                       env={**os.environ, "OMP_NUM_THREADS": "1", **env}, check=True,
                       stdout=subprocess.DEVNULL)
    df = pd.read_csv(run / "results.csv").drop(columns=TIMING)
    return df.sort_values(["variant", "seed", "domain", "task", "teacher_lag_days"]
                          ).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {name: _run(name, env, args.out) for name, env in SETTINGS.items()}
    ref = runs["default"]
    floats = [c for c in ref.columns if pd.api.types.is_float_dtype(ref[c])]
    rows = []
    for name, df in runs.items():
        rel = ((df[floats] - ref[floats]).abs() / ref[floats].abs().clip(lower=1e-12)).max()
        rows.append(rel.rename(name))
    print(pd.DataFrame(rows).T.to_string(float_format="%.2e"))


if __name__ == "__main__":
    main()

"""How far a batched pack's members are from their runs alone: one tiny ``gemkd run`` at the
default pack size and at ``--pack-size 1`` (each run alone), the largest |ΔNE| per variant.

Why: a resume retrains a torn run outside the pack it first ran in; DESIGN §6 states the bound
this measures (docs/notes/2026-12-06-integrity.md)::

    OMP_NUM_THREADS=1 python -m benchmarks.pack_bound --out /tmp/pack_bound
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import yaml

SPEC = {
    "name": "pack_bound", "seeds": [0, 1, 2],
    "data": {"source": "synthetic", "preset": "tiny",
             "overrides": {"examples_per_day": 1000, "n_users": 500, "history_days": 5}},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 16, "max_steps": 8}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [8]}},
    "student_tasks": ["click", "conversion"],
    "variants": ["baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr", "hierarchical", "full"],
    "tuning": {"trials": 1},
}
KEYS = ["variant", "seed", "domain", "task"]


def main() -> None:
    from gemkd.experiments.cli import main as gemkd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a new folder for the two runs")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    spec = a.out / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    ne = {}
    for size in ("16", "1"):
        out = a.out / f"pack{size}"
        code = gemkd(["run", str(spec), "--out", str(out), "--threads", "1", "--workers", "1",
                      "--pack-size", size])
        if code:
            raise SystemExit(f"gemkd run --pack-size {size} failed ({code})")
        ne[size] = pd.read_csv(out / "results.csv").sort_values(KEYS).set_index(KEYS)["ne"]
    diff = (ne["16"] - ne["1"]).abs().groupby(level="variant").max()
    print("max |NE packed - NE alone| per variant (3 seeds, pack size 16 vs 1):")
    print(diff.to_string(float_format="{:.3g}".format))
    print(f"all: {diff.max():.3g}")


if __name__ == "__main__":
    main()

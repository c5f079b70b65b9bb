"""Serving latency of a student artifact (``gemkd student export``): its ``torch.export``
program per request, with and without LoopFM codes, against the eager student.

    python -m benchmarks.bench_artifact [--json OUT] [--quick] [--threads 1] [--requests 500]
        [--candidates 100]

Why: the artifact is what a user takes to serving; its program must cost what the student
costs, and the code table's as-of lookup what ``bench_serving``'s repr path measured. A request
is one user at one time with N candidate ads (``bench_serving.make_requests``, histories cut to
the student's ``max_seq_len`` as the artifact's contract asks). The artifacts are exported by
the real path: a kept student written through ``kept_students.save_student`` into a run
directory, then ``export_student``. Paths, per request, each after ``--warmup`` untimed
requests, interleaved:

* ``artifact``: the quickstart ``mlp`` student's program (no codes);
* ``eager``: the same student's module forward on the batch, as gemkd evaluates it;
* ``artifact+codes``: a kd_repr student's program fed by the artifact's code table (the host
  as-of lookup of the request's user, then the program, which pools the codes);
* ``eager+codes``: the same kd_repr student as gemkd runs it (``Repr.features`` then the
  module's forward), for comparison.

Weights are untrained and codes random (latency does not depend on their values), written by
the real code-store writer as in ``bench_serving``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_serving import make_requests, percentile_ms, run_requests, write_codes
from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    print_figures,
    write_json,
)
from gemkd.experiments.artifacts import StudentArtifact, export_student
from gemkd.experiments.run.jobs import StudentRun
from gemkd.experiments.run.kept_students import save_student
from gemkd.experiments.run.methods import build_methods
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec import load_spec
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.students import build_student
from gemkd.transfer.config import load_dataclass
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.synth import SynthConfig, generate
from gemkd.transfer.distill import DistillModule
from gemkd.transfer.methods import MethodContext
from gemkd.transfer.repr_features import AsOfCodes, CodeStore

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("artifact", "eager", "artifact+codes", "eager+codes")


def kept_artifact(spec, variant: str, data: Path, codes: Path | None, days: tuple[int, int],
                  run: RunDir, out: Path) -> tuple[StudentArtifact, DistillModule]:
    """``variant``'s untrained student kept and exported as a run keeps and exports it."""
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(data)
    tasks = list(spec.student_tasks)
    methods = build_methods(spec, spec.variant(variant), {})
    ctx = MethodContext(schema=schema, tasks=tasks, domains=schema.domains, lr=spec.lr,
                        codes=None if codes is None else AsOfCodes(CodeStore(codes),
                                                                   spec.repr.max_events))
    feeding = [m for m in methods if "codes" in m.needs]
    init = dict(spec.student.init_args)
    if feeding:
        init["repr_dim"] = sum(m.feature_dim(ctx) for m in feeding)
    torch.manual_seed(0)
    student = build_student({"class_path": spec.student.class_path, "init_args": init}, schema,
                            tasks)
    for m in feeding:
        m.setup(ctx)
    module = DistillModule(student, tasks, schema.domains, methods=feeding)
    module.student_config = {"class_path": spec.student.class_path, "init_args": init}
    record = StudentRun(key=f"final|{variant}|0|0", phase="final", spec=spec, variant=variant,
                        params={}, seed=0, lag=0, world=0, train_days=(days[0] - 1, days[0]),
                        eval_days=days, trained_until_day=days[0] - 2, data=str(data),
                        stores={}, base_rates={}, codes=None if codes is None else str(codes),
                        student=str(run.student_path(0, 0, variant, 0)))
    save_student(record, module.eval(), {})
    return StudentArtifact(export_student(run.path, variant, out, seed=0)), module.eval()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--candidates", type=int, default=100, help="candidate ads per request")
    p.add_argument("--requests", type=int, default=None, help="default 500 (50 with --quick)")
    p.add_argument("--warmup", type=int, default=10, help="untimed requests first")
    args = p.parse_args()
    apply_common_args(p, args)
    n_requests = args.requests or (50 if args.quick else 500)
    # the quickstart's student and repr settings; the variants the artifacts come from: the
    # labels-only student and one fed the codes (repr alone: its KD needs a teacher store,
    # which serving never reads)
    quick = load_spec(None).to_dict()
    spec = spec_from_mapping({**quick, "variants": {"baseline": [], "kd_repr": ["repr"]}})
    preset = "tiny" if args.quick else (spec.data.preset or "small")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_artifact-") as tmp:
        data, codes = Path(tmp) / "data", Path(tmp) / "codes"
        schema = generate(load_dataclass(SynthConfig, ROOT / "experiments/data" / f"{preset}.yaml"),
                          data)
        write_codes(data, codes, spec.repr.code_dim, spec.repr.bits)
        days = (schema.days[len(schema.days) // 2], schema.days[-1] + 1)
        run = RunDir(Path(tmp) / "run")
        plain, plain_module = kept_artifact(spec, "baseline", data, None, days, run,
                                            Path(tmp) / "a0")
        with_codes, module = kept_artifact(spec, "kd_repr", data, codes, days, run,
                                           Path(tmp) / "a1")
        max_seq_len = plain.max_seq_len or 0
        requests = make_requests(data, days, args.candidates, n_requests + args.warmup,
                                 max_seq_len)
        program, program_codes = plain.program, with_codes.program

        def artifact(req: Batch) -> None:
            program(*plain.inputs(req))

        def eager(req: Batch) -> None:
            plain_module.serving_logits(req)

        def artifact_codes(req: Batch) -> None:
            program_codes(*with_codes.inputs(req))  # the host as-of lookup, then the program

        def eager_codes(req: Batch) -> None:
            module.serving_logits(req)

        check = requests[0]
        with torch.no_grad():
            diff = float((with_codes.predict(check) - module.serving_logits(check)).abs().max())
        times = run_requests({"artifact": artifact, "eager": eager,
                              "artifact+codes": artifact_codes, "eager+codes": eager_codes},
                             requests, args.warmup, "cpu")
        artifact_bytes = {name: sum(f.stat().st_size for f in (Path(tmp) / name).rglob("*")
                                    if f.is_file()) for name in ("a0", "a1")}
        kept_bytes = {k.variant: k.path.stat().st_size for k in run.kept_students()}
        hist = [r.seq_max_len for r in requests]
    res = {
        "candidates": args.candidates, "requests": len(requests) - args.warmup,
        "threads": torch.get_num_threads(), "preset": preset,
        "mean_history": round(float(np.mean(hist)), 1),
        "max_abs_logit_diff_program_vs_eager": diff,
        "artifact_bytes": {"baseline": artifact_bytes["a0"], "kd_repr": artifact_bytes["a1"]},
        "kept_student_bytes": kept_bytes,
        "latency_ms": {k: {"p50": percentile_ms(v, 50), "p99": percentile_ms(v, 99)}
                       for k, v in times.items()},
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    figs = figures(res)
    print(f"artifact serving: {res['requests']} requests x {args.candidates} candidates "
          f"({preset} world, mean history {res['mean_history']}), {res['threads']} threads, "
          f"cpu; program vs eager max |logit diff| {diff:.2e}; total {res['total_seconds']} s")
    print_figures(figs)
    write_json(args.json, {"bench": "artifact", "quick": args.quick, "device": "cpu", **res,
                           "figures": figs})


def figures(r: dict) -> list[dict]:
    lat, n = r["latency_ms"], r["candidates"]
    out = []
    names = {"artifact": "artifact program (mlp)", "eager": "eager mlp student",
             "artifact+codes": "artifact program + code-table lookup (mlp, kd_repr)",
             "eager+codes": "eager kd_repr student as gemkd runs it"}
    for path in PATHS:
        for q in ("p50", "p99"):
            out.append(figure(f"serving latency, {names[path]}, 1 request x {n} ads, {q} (cpu)",
                              lat[path][q], "ms"))
    for q in ("p50", "p99"):
        out.append(figure(f"serving {q}: artifact program ÷ eager student (mlp)",
                          lat["artifact"][q] / lat["eager"][q]))
        out.append(figure(f"serving {q}: artifact program + lookup ÷ eager (kd_repr)",
                          lat["artifact+codes"][q] / lat["eager+codes"][q]))
    out.append(figure("kd_repr artifact on disk (weights, program, schema, code table)",
                      r["artifact_bytes"]["kd_repr"] / 1e6, "MB"))
    out.append(figure("kept student in RUN_DIR/students (kd_repr)",
                      r["kept_student_bytes"]["kd_repr"] / 1e3, "kB"))
    return out


if __name__ == "__main__":
    main()

"""The quickstart's student phase (tuning and final runs) in packs against one run per pass.

    python -m benchmarks.bench_student_phase [--run runs/quickstart] [--repeats 3] [--json OUT]

Why: a sweep's students are trained in packs (DESIGN §6); what a user waits for is the whole
student phase of ``gemkd run`` — every search round and final run, the rounds' waits for their
slowest pack included — not one pack's epoch. This reruns the student phase of a finished
quickstart (``make demo``: its cached steps are hard-linked into fresh run directories, so no
teacher is trained again) with the run's own settings, once with packs (``--pack-size 16``, the
default) and once one run per pass (``--pack-size 1``: each run a pack of one), in interleaved
rounds, and reads each run's ``phases.json``. Students per second = the sweep's student runs ÷
(tuning + final runs seconds). A run directory without cached steps is skipped with a line
saying so (nothing written): ``make bench`` works before ``make demo``.

Both configurations use the run's workers (``--workers 2`` on 2 cores) and ``--threads 1``: the
figure is the quickstart's, on this machine. ``benchmarks/bench_packs.py`` times one pack against
Lightning's run alone instead.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import figure, print_figures, quiet_lightning, write_json
from gemkd.experiments.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[1]
STUDENT_PHASES = ("tuning", "final runs")


def _link_cache(src: Path, dst: Path) -> None:
    """``dst/cache`` holding hard links to ``src/cache``'s finished steps (no copy)."""
    shutil.copytree(RunDir(src).cache, RunDir(dst).cache, copy_function=_link)


def _link(src: str, dst: str) -> None:
    import os

    try:
        os.link(src, dst)
    except OSError:  # another file system: a copy
        shutil.copy2(src, dst)


def student_seconds(run: Path, out: Path, pack_size: int, workers: int) -> tuple[float, int]:
    """Seconds of the student phase (tuning + final runs) of the quickstart rerun into ``out``
    from ``run``'s cached steps at ``pack_size``, and its student runs (without the robustness
    repeat, which would time the same phase again)."""
    from gemkd.experiments.cli import main

    _link_cache(run, out)
    with contextlib.redirect_stdout(io.StringIO()):  # the run's table: not a figure
        code = main(["run", str(run / RunDir.SPEC), "--out", str(out), "--threads", "1",
                     "--workers", str(workers), "--pack-size", str(pack_size),
                     "--set", "robustness.perturb=null"])
    if code != 0:
        raise RuntimeError(f"gemkd run into {out} exited {code}")
    done = RunDir(out)
    phases = done.phases() or {}
    return sum(float(phases.get(p, 0.0)) for p in STUDENT_PHASES), len(done.ledger())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, default=Path("runs/quickstart"),
                   help="a finished `gemkd run` (make demo's) whose cached steps are reused")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (median)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not (args.run / RunDir.SPEC).is_file() or not RunDir(args.run).has_done_steps():
        print(f"bench_student_phase: no finished run with cached steps at {args.run} (run `make "
              "demo` first); skipped")
        return 0
    quiet_lightning()
    seconds: dict[int, list[float]] = {16: [], 1: []}
    runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for size in (16, 1) if r % 2 == 0 else (1, 16):
                s, runs = student_seconds(args.run, Path(tmp) / f"p{size}-{r}", size,
                                          args.workers)
                seconds[size].append(s)
                print(f"  round {r} pack size {size}: student phase {s:.1f} s ({runs} runs)",
                      flush=True)
    med = {k: statistics.median(v) for k, v in seconds.items()}
    figs = [figure(f"quickstart student phase ({runs} runs, --workers {args.workers}), "
                   "one run per pass: seconds", med[1], "s"),
            figure("quickstart student phase, packs of up to 16: seconds", med[16], "s"),
            figure("quickstart student phase: packs / one run per pass, students per second",
                   med[1] / med[16], "x", target=">= 6",
                   note="one run per pass = --pack-size 1 (each run a batched pack of one, "
                        f"faster than Lightning's run alone: bench_packs K=1); medians of "
                        f"{args.repeats} interleaved rounds")]
    print(f"bench_student_phase: {args.run}")
    print_figures(figs)
    write_json(args.json, {"bench": "student_phase", "figures": figs, "run": str(args.run),
                           "seconds": {str(k): v for k, v in seconds.items()}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A ``gemkd run`` directory, written and read through one class: what the runner writes, where,
and how it reads back (the runner, the report, the studies, the benchmarks and the CLI go through
:class:`RunDir`, never through the file names themselves). Whole files are written atomically
(a temporary name, then a rename: a reader never sees a torn file); the ledger and the log grow
a line at a time.

Layout (version :data:`LAYOUT_VERSION`, recorded in ``run.json``; a run without the file reads
as version 1)::

    run.json                  {"layout_version": 1}
    spec.yaml                 the spec as run (RunSpec.to_dict())
    environment.json          versions and torch thread counts (``threads``, ``run_threads``)
    command.txt               the command line
    log.txt                   the run's progress log
    phases.json               the run's wall seconds per phase (steps, tuning, final runs)
    runs.jsonl                the ledger: one finished student run a line, {"key": ..., ...}
    results.csv               one row per variant × seed × world × domain × task × lag
                              (gemkd.experiments.run_dir.results_schema)
    tuning.csv                every search trial, one row per knob (run.tuning_rows)
    teacher_data.json         teacher vs student rows per world and lag (run.data_ratio)
    teacher_fit.json          each teacher fit's validation curve and kept epoch (run.teacher_curve)
    sampled_negatives.json    how a positive-only log's negatives were drawn (when they were)
    curves/<variant>_seed<S>_lag<L>[_w<W>].csv                 a final run's training curve
    clusters/world=<W>/lag=<L>/<variant>__seed<S>.npz           per-user evaluation sums
                              (compressed, float32 loss: transfer.metrics.clusters; the
                              float64 np.savez files of older runs read the same way)
    clusters/world=<W>/lag=<L>/teacher__<source>.npz            ... of a teacher's store
    students/world=<W>/lag=<L>/<variant>__seed<S>.pt            a kept final student (its
                              evaluated weights and what rebuilds it; spec keep_students)
    cache/<step>-<hash>/{config.json, DONE, ...}              cached steps (run.cache)
    logs/prepare_world<W>.txt                                 a worker's lines per prepared world
    logs/...                                                  a tracker's files (the spec's logger)
    .lock                                                     held by the run that owns it
    perturbed/                the repeat under perturbed numerics (spec key robustness): a run
                              directory of its own (run.json, spec.yaml, runs.jsonl, results.csv,
                              tuning.csv, tuning/, curves/, clusters/), no cache
    report.md, intervals.csv, plots/                          written by ``gemkd report``
"""

from __future__ import annotations

from gemkd.experiments.run_dir.run_dir_layout import (
    LAYOUT_VERSION,
    RunDirLayout,
    read_layout_version,
)
from gemkd.experiments.run_dir.run_dir_readers import (
    CURVE_METRICS,
    TUNING_REQUIRED,
    FinalRun,
    KeptStudent,
    RunDirReaders,
    read_csv,
    read_ledger,
)
from gemkd.experiments.run_dir.run_dir_writers import RunDirWriters, write_student_file

__all__ = ["CURVE_METRICS", "LAYOUT_VERSION", "TUNING_REQUIRED", "FinalRun", "KeptStudent",
           "RunDir", "RunDirLayout", "read_csv", "read_layout_version", "read_ledger",
           "write_student_file"]


class RunDir(RunDirReaders, RunDirWriters):
    """One run directory. Constructing it checks the layout version (a newer one is a
    ConfigError saying which gemkd to use); every reader names the file it could not read;
    every writer replaces its file whole (atomically), except the ledger's and the log's lines,
    which are appended. The file names and paths: :class:`RunDirLayout`; the readers and the
    writers: :mod:`~gemkd.experiments.run_dir.run_dir_readers`,
    :mod:`~gemkd.experiments.run_dir.run_dir_writers`."""

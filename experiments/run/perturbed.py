"""The repeat of ``robustness:`` (DESIGN §6, verdict robustness): every variant's search and
final runs once more, each student's initial weights moved by one unit in the last place, into
``RUN_DIR/perturbed/`` — a run directory of its own (ledger, studies, per-user evaluation
files, results), so its keys never meet the main run's and the report reads it as it reads
any run.

Why a perturbation of the initial weights, not another thread count: a run is deterministic
on one machine, and another CPU differs from it in the last bits of its sums (vector widths,
summation orders, fused multiply-adds); training and then the search amplify such a difference
into other knobs and other numbers. One ulp of every weight is that kind of difference, made on
purpose: it always differs (a second torch thread changes nothing in kernels too small to
split, so that check could pass by doing nothing), it costs what the main runs cost on any
executor, and it is deterministic, so the repeat itself reproduces on one machine. It perturbs
the students, not the teacher, store or codes the repeat shares: another CPU perturbs those
too, so a verdict that holds here can still move there, and one that flips here is fragile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gemkd.experiments.run.context import LagCell, RunContext
from gemkd.experiments.run.tuning_rows import TUNING_COLUMNS
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.run_spec import RunSpec

#: The repeat's run directory, under the main one.
FOLDER = RunDir.PERTURBED
@dataclass
class Repeat(RunContext):
    """The repeat's context: its own run directory, ledger and studies, its student runs
    perturbed; ``rows`` and ``tuning_rows`` its results.csv and tuning.csv."""

    rows: list[dict] = field(default_factory=list)
    tuning_rows: list[dict] = field(default_factory=list)


def open_repeat(ctx: RunContext) -> Repeat | None:
    """The repeat of ``ctx``'s run (None when ``robustness.perturb`` is null): the same spec,
    log and executor, ``RUN_DIR/perturbed`` with its ledger (a resumed run reuses its lines);
    no tracker (the repeat is a check of the run, not more of its results)."""
    how = ctx.spec.robustness.perturb
    if how is None:
        return None
    out = ctx.out / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    run = RunDir(out)
    return Repeat(ctx.spec, ctx.plan, out, ctx.log, ctx.executor, None, run.ledger(), perturb=how)


def repeat_cell(cell: LagCell, how: str) -> LagCell:
    """``cell`` for the repeat: its tag (in every run key and study name) marks the
    perturbation, so no perturbed line can be read as a main one or the reverse."""
    tag = hashlib.sha256(f"{cell.tag}|perturb={how}".encode()).hexdigest()[:12]
    return dataclasses.replace(cell, tag=tag)


def copy_teacher_sums(ctx: RunContext, repeat: Repeat, cell: LagCell) -> None:
    """The teachers' per-user evaluation sums of the cell into the repeat's folder: the same
    teacher, evaluated once (the report's teacher comparisons read them)."""
    src = ctx.run.clusters_path(cell.world, cell.lag, "x").parent
    dst = repeat.run.clusters_path(cell.world, cell.lag, "x").parent
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.glob("teacher__*.npz"):
        shutil.copy2(f, dst / f.name)


def finish(repeat: Repeat, spec: RunSpec, derive: Any) -> None:
    """Write the repeat's run files: run.json, spec.yaml, tuning.csv and results.csv (``derive``:
    the main run's :func:`gemkd.experiments.run.results.derive`)."""
    run = repeat.run
    run.write_layout()
    run.write_spec(spec.to_dict())
    run.write_tuning(pd.DataFrame(repeat.tuning_rows, columns=list(TUNING_COLUMNS)))
    run.write_results(derive(pd.DataFrame(repeat.rows)))

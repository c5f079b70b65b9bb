"""``gemkd report RUN_DIR``: the tables, plain-language summary and plots of a benchmark run.

A run directory written by ``gemkd run`` holds ``results.csv`` (one row per variant × seed ×
domain × task × teacher lag), optionally ``tuning.csv``, ``curves/<variant>_seed<k>_lag<l>.csv``
and ``spec.yaml``, and ``clusters/`` (per-user evaluation sums; the oldest runs lack it); the
package reads them only through :class:`gemkd.experiments.run_dir.RunDir` (the layout,
versioned). It turns them into ``report.md``, ``intervals.csv`` and ``plots/*.png`` (DESIGN
§6, §6.1): ΔNE, efficiency vs KD and TR with 95 % intervals that hold the evaluation users',
the training seeds' and the worlds' noise, verdicts from those intervals
(:mod:`gemkd.experiments.report.intervals`), NE differences to 4 decimals, and the two "what it
means" sentences generated from the numbers, never canned. A run without ``clusters/`` keeps
mean ± std over seeds and gets no verdict.

Conventions: std is the sample std over seeds (ddof=1; n/a with one seed); ±inf (a ratio with a
zero denominator, e.g. TR when the teacher is no better than the baseline) counts as missing; the
main tables use the smallest teacher lag (the freshest teacher).
"""

from gemkd.experiments.report.intervals import Intervals, run_intervals
from gemkd.experiments.report.render import render_report, report_command, write_plots, write_report
from gemkd.experiments.report.summary import VARIANTS, RunView, summarize
from gemkd.experiments.report.text import what_it_means

__all__ = ["VARIANTS", "Intervals", "RunView", "render_report", "report_command", "run_intervals",
           "summarize", "what_it_means", "write_plots", "write_report"]

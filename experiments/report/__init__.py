"""``gemkd report RUN_DIR``: the tables, plain-language summary and plots of a benchmark run.

A run directory written by ``gemkd run`` holds ``results.csv`` (one row per variant × seed ×
domain × task × teacher lag), optionally ``tuning.csv``, ``curves/<variant>_seed<k>_lag<l>.csv``
and ``spec.yaml``. This package turns them into ``report.md`` and ``plots/*.png`` (DESIGN §6,
§6.1): every number is mean ± std over seeds, NE differences to 4 decimals, and the two "what
it means" sentences are generated from the numbers, never canned.

Conventions: std is the sample std over seeds (ddof=1; n/a with one seed); ±inf (a ratio with a
zero denominator, e.g. TR when the teacher is no better than the baseline) counts as missing; the
main tables use the smallest teacher lag (the freshest teacher).
"""

from experiments.report.load import load_curves, load_results, load_tuning
from experiments.report.render import render_report, report_command, write_plots, write_report
from experiments.report.summary import VARIANTS, RunView, summarize
from experiments.report.text import what_it_means

__all__ = ["VARIANTS", "RunView", "load_curves", "load_results", "load_tuning", "render_report",
           "report_command", "summarize", "what_it_means", "write_plots", "write_report"]

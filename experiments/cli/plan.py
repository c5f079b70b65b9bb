"""``gemkd plan``: argument parsing over :func:`gemkd.experiments.report.run_plan.plan_run`."""

from __future__ import annotations

import argparse

from gemkd.experiments.cli.declare import Command, Opt, arguments

PLAN_RUN = "gemkd.experiments.report.run_plan:plan_run"


def _plan(args: argparse.Namespace) -> None:
    from gemkd.experiments.report.run_plan import plan_run

    print(plan_run(**arguments(args)).text())


COMMANDS = (
    Command(("plan",), "how many seeds, evaluation users or worlds would resolve an effect, "
            "from a run's own variance components (its MDE at the wanted power, per way of "
            "growing the run)", run=_plan, calls=PLAN_RUN, options=(
                Opt("run_dir", "a directory written by gemkd run (per-user evaluation files, "
                    "at least 2 seeds in a world)", param="run_dir"),
                Opt("--effect", "the true NE difference to resolve, e.g. 0.001 (a tenth of a "
                    "percent of an NE near 1)", type=float, required=True, param="effect"),
                Opt("--power", "the probability the interval should exclude 0 at that effect",
                    type=float, default=0.8, param="power"),
                Opt("--alpha", "the two-sided level of each interval", type=float,
                    default=0.05, param="alpha"),
                Opt("--task", "the task (default: the report's main one)", param="task"),
                Opt("--domain", "the domain (default: the report's main one)", param="domain"),
                Opt("--lag", "the teacher lag in days (default: the first)", type=int,
                    param="lag"),
                Opt("--variant", "plan from this variant's components (default: their median "
                    "over the variants)", param="variant"),
                Opt("--stat", "the contrast: ΔNE against the baseline, ΔNE − ΔNE(KD), or both",
                    choices=("both", "delta_ne", "vs_kd"), default="both", param="stat"),
                Opt("--holm", "plan at α/m, Holm's strictest step for the run's primary family "
                    "of m comparisons", flag=True, param="holm"),
            )),
)

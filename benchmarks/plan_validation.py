"""Does ``gemkd plan`` predict the half-width a rerun at the planned size gets? (DESIGN §6)

Two checks, each a pilot, the planner's prediction at a larger size from the pilot's own
variance components, and the half-width of runs at that size:

* ``sim``: the null simulation (gemkd.transfer.metrics.null_sim: per-user sums with known
  users', seeds' and per-world noise) — many pilots and many reruns, so the prediction's bias
  (the mean prediction against the mean realized half-width) and its spread from one pilot are
  both measured; tests/experiments/report/test_run_plan.py runs the same check smaller.
* ``real``: a real pilot (the quickstart with fewer variants and seeds) and its rerun with the
  seeds the planner names, both through ``gemkd run`` (the rerun reuses the pilot's runs: the
  seeds' runs do not depend on how many seeds there are, as adding seeds to a run does).

Usage::

    python -m benchmarks.plan_validation sim [--runs 1000] [--samples 500]
    python -m benchmarks.plan_validation real --out /tmp/plan [--pilot-seeds 0,1,2]
        [--seeds 10] [--set KEY=VALUE ...] [--threads 1]
    python -m benchmarks.plan_validation eval-days --out /tmp/plan --set data.overrides.n_days=16
        [--days 12,14] [--more 12,16] [--seeds 0,1,2] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import EvalSet
from gemkd.experiments.report.intervals import lag_tables
from gemkd.experiments.report.world_arrays import world_arrays
from gemkd.transfer.metrics.contrasts import Units
from gemkd.transfer.metrics.null_sim import NOISE_MIXES, Scenario, SimWorld, draw_run
from gemkd.transfer.metrics.power import Components, predict, run_components

#: (name, pilot (worlds, seeds), planned (worlds, seeds), noise mix, contrast) of the sim check
SIM_CASES = (
    ("users dominate, 3 → 10 seeds", (1, 3), (1, 10), "users", ("better", "kd")),
    ("seeds dominate, 3 → 10 seeds", (1, 3), (1, 10), "seeds", ("better", "kd")),
    ("alike, 3 → 10 seeds", (1, 3), (1, 10), "balanced", ("better", "kd")),
    ("search draw per world, 3 → 8 worlds", (3, 3), (8, 3), "search", ("kd", "baseline")),
)


def eval_sets(worlds: list[SimWorld]) -> list[EvalSet]:
    """The simulated worlds as the report reads them: each replicate a "task"."""
    tasks = [f"r{i}" for i in range(worlds[0].sums.n_tasks)]
    return [EvalSet(w.world, 0, tasks, ["all"], w.students, w.teachers, w.sums)
            for w in worlds]


def pilot_components(worlds: list[SimWorld], variant: str, reference: str, samples: int,
                     seed: int = 0) -> list[Components]:
    """Each replicate's components of ``NE(reference) − NE(variant)`` as the planner measures
    them (the report's user resamples of every world)."""
    sets = eval_sets(worlds)
    variants = list(dict.fromkeys(v for v, _ in sets[0].students))
    per = [world_arrays(es, variants, samples, seed) for es in sets]
    v, r = variants.index(variant), variants.index(reference)
    units = []
    for p in per:
        arms = Units(p.seed_ne, p.reps, p.n_users)
        units.append(arms.take(r) - arms.take(v))
    comp = run_components(units)  # [G, R]; the last group is every domain
    out = []
    for i in range(comp["seeds"].shape[-1]):
        out.append(Components(float(comp["users_shared"][-1, i]),
                              float(comp["users_seed"][-1, i]), float(comp["seeds"][-1, i]),
                              float(comp["worlds"][-1, i]), len(worlds),
                              float(comp["n_seeds"][-1, i]), float(p.n_users)))
    return out


def realized(worlds: list[SimWorld], variant: str, reference: str, samples: int,
             seed: int = 0) -> np.ndarray:
    """The report's half-widths of the contrast in each replicate of a run."""
    table, _ = lag_tables(eval_sets(worlds), samples, seed, [(0.95, reference)])[0]
    t = table[table["variant"] == variant]
    col = "delta_ne_half_width" if reference == "baseline" else "vs_kd_half_width"
    return t[col].to_numpy(dtype=np.float64)


@dataclass(frozen=True)
class SimCheck:
    """One case: the planner's prediction from each pilot, each rerun's half-width, and the
    prediction from the true components."""

    name: str
    predicted: np.ndarray
    realized: np.ndarray
    from_truth: float

    @property
    def bias(self) -> float:
        """Mean prediction over mean realized half-width (1: unbiased)."""
        return float(np.mean(self.predicted) / np.mean(self.realized))

    @property
    def within_25(self) -> float:
        """Share of single pilots whose prediction is within ±25 % of the mean realized."""
        ratio = self.predicted / np.mean(self.realized)
        return float(np.mean((ratio >= 0.75) & (ratio <= 1.25)))

    def row(self) -> dict:
        q = np.quantile(self.predicted / np.mean(self.realized), [0.1, 0.5, 0.9])
        return {"case": self.name, "predicted (mean)": float(np.mean(self.predicted)),
                "realized (mean)": float(np.mean(self.realized)), "bias": self.bias,
                "truth / realized": self.from_truth / float(np.mean(self.realized)),
                "pilot ratio p10": q[0], "p50": q[1], "p90": q[2],
                "pilots within ±25 %": self.within_25}


def true_components(s: Scenario, variant: str, reference: str) -> Components:
    """The sim's components of a difference of two arms (each arm's noises are its own)."""
    return Components(2 * s.user_sd ** 2, 2 * s.user_seed_sd ** 2, 2 * s.seed_sd ** 2,
                      2 * s.world_sd ** 2 if s.worlds >= 2 else math.nan, s.worlds, s.seeds,
                      s.users)


def sim_check(name: str, pilot: tuple[int, int], planned: tuple[int, int], mix: str,
              pair: tuple[str, str], runs: int, samples: int, users: int = 200) -> SimCheck:
    """``runs`` pilots and ``runs`` independent reruns at the planned size."""
    variant, reference = pair
    p = Scenario(f"plan-pilot-{mix}-{pilot}", *pilot, users=users, **NOISE_MIXES[mix])
    q = Scenario(f"plan-rerun-{mix}-{planned}", *planned, users=users, **NOISE_MIXES[mix])
    comps = pilot_components(draw_run(p, runs, seed=1), variant, reference, samples)
    predicted = np.array([predict(c, *planned).half_width for c in comps])
    got = realized(draw_run(q, runs, seed=2), variant, reference, samples)
    truth = predict(true_components(p, variant, reference), *planned).half_width
    return SimCheck(name, predicted, got, truth)


def run_sim(runs: int, samples: int) -> pd.DataFrame:
    rows = [sim_check(name, pilot, planned, mix, pair, runs, samples).row()
            for name, pilot, planned, mix, pair in SIM_CASES]
    return pd.DataFrame(rows)


def run_real(out: Path, pilot_seeds: list[int], seeds: int, sets: list[str], threads: int,
             effect: float | None) -> dict:
    """Pilot, plan, rerun at the planned seeds (the pilot's directory copied and extended)."""
    import shutil

    from gemkd.experiments.report.run_plan import plan_run
    from gemkd.experiments.report.summary import RunView
    _predict = predict

    def gemkd_run(run_dir: Path, seed_list: list[int]) -> float:
        from benchmarks.common import run_child

        argv = ["-m", "gemkd.experiments.cli", "run", "experiments/quickstart.yaml", "--out",
                str(run_dir), "--threads", str(threads), "--workers", "1",
                "--set", f"seeds=[{','.join(map(str, seed_list))}]"]
        for s in sets:
            argv += ["--set", s]
        return run_child(argv, f"gemkd run {run_dir}", threads=threads).seconds

    pilot_dir, rerun_dir = out / "pilot", out / "rerun"
    t_pilot = gemkd_run(pilot_dir, pilot_seeds)
    run = RunView(pilot_dir)
    figures: list[dict] = []
    for task in run.tasks:
        for stat in ("delta_ne", "vs_kd"):
            plan = plan_run(pilot_dir, effect or 1.0, task=task, stat=stat)
            if stat not in plan.components:
                continue
            c = plan.components[stat]
            pred = _predict(c, int(c.n_worlds), seeds)
            figures.append({"task": task, "stat": stat,
                            "pilot_half_width": _half(run, task, stat),
                            "predicted_half_width": pred.half_width,
                            "predicted_mde": pred.mde, "pilot_mde": _mde(run, task, stat),
                            "split": c.split()})
    if rerun_dir.exists():
        shutil.rmtree(rerun_dir)
    shutil.copytree(pilot_dir, rerun_dir)
    more = range(max(pilot_seeds) + 1, max(pilot_seeds) + 1 + seeds - len(pilot_seeds))
    t_rerun = gemkd_run(rerun_dir, [*pilot_seeds, *more])
    rerun = RunView(rerun_dir)
    for f in figures:
        f["rerun_half_width"] = _half(rerun, f["task"], f["stat"])
        f["rerun_mde"] = _mde(rerun, f["task"], f["stat"])
        f["predicted_over_rerun"] = f["predicted_half_width"] / f["rerun_half_width"]
    return {"pilot_seeds": pilot_seeds, "planned_seeds": seeds, "sets": sets,
            "pilot_seconds": t_pilot, "rerun_seconds": t_rerun, "domain": run.domain,
            "figures": figures}


def run_eval_days(out: Path, seeds: list[int], sets: list[str], threads: int,
                  days: tuple[int, int], more: tuple[int, int]) -> dict:
    """The same training evaluated on ``days`` and then on ``more`` evaluation days (forward
    passes only; the second run is a copy of the first, so data and teacher are reused): the
    half-widths before and after, and the planner's prediction for the users' factor the
    evaluation rows grew by (it assumes new users: more days of the same users help less)."""
    import shutil

    from benchmarks.common import run_child
    from gemkd.experiments.report.run_plan import plan_run
    from gemkd.experiments.report.summary import RunView

    def gemkd_run(run_dir: Path, eval_days: tuple[int, int]) -> float:
        argv = ["-m", "gemkd.experiments.cli", "run", "experiments/quickstart.yaml", "--out",
                str(run_dir), "--threads", str(threads), "--workers", "1",
                "--set", f"seeds=[{','.join(map(str, seeds))}]",
                "--set", f"eval_days=[{eval_days[0]},{eval_days[1]}]"]
        for s in sets:
            argv += ["--set", s]
        return run_child(argv, f"gemkd run {run_dir}", threads=threads).seconds

    before_dir, after_dir = out / "eval_before", out / "eval_after"
    t_before = gemkd_run(before_dir, days)
    if after_dir.exists():
        shutil.rmtree(after_dir)
    shutil.copytree(before_dir, after_dir)
    t_after = gemkd_run(after_dir, more)
    before, after = RunView(before_dir), RunView(after_dir)
    figures = []
    for task in before.tasks:
        for stat in ("delta_ne", "vs_kd"):
            plan = plan_run(before_dir, 1.0, task=task, stat=stat)
            if stat not in plan.components:
                continue
            c = plan.components[stat]
            sb = _size(before, task)
            sa = _size(after, task)
            k_rows, k_users = sa[1] / sb[1], sa[0] / sb[0]
            figures.append({
                "task": task, "stat": stat, "users": [sb[0], sa[0]], "rows": [sb[1], sa[1]],
                "half_width_before": _half(before, task, stat),
                "half_width_after": _half(after, task, stat),
                "predicted_if_rows_were_new_users": predict(
                    c, int(c.n_worlds), int(round(c.n_seeds)), k_rows).half_width,
                "predicted_at_the_users_factor": predict(
                    c, int(c.n_worlds), int(round(c.n_seeds)), k_users).half_width,
                "predicted_as_run": predict(c, int(c.n_worlds),
                                            int(round(c.n_seeds))).half_width})
    return {"seeds": seeds, "sets": sets, "eval_days": [list(days), list(more)],
            "seconds": [t_before, t_after], "figures": figures}


def _size(run, task: str) -> tuple[float, float]:
    f = run.sensitivity
    f = f[(f["teacher_lag_days"] == run.lag) & (f["domain"] == run.domain) & (f["task"] == task)]
    return float(f["n_users"].iloc[0]), float(f["eval_rows"].iloc[0])


def _rows(run, task: str, stat: str) -> pd.DataFrame:
    """The main slice's rows of a contrast, its reference row (of width 0) left out."""
    t = run.csv_table
    own = "baseline" if stat == "delta_ne" else run.intervals.reference
    return t[(t["teacher_lag_days"] == run.lag) & (t["domain"] == run.domain)
             & (t["task"] == task) & (t["variant"] != own)]


def _half(run, task: str, stat: str) -> float:
    """The median over variants of the contrast's 95 % half-width."""
    return float(_rows(run, task, stat)[f"{stat}_half_width"].median())


def _mde(run, task: str, stat: str) -> float:
    return float(_rows(run, task, stat)[f"{stat}_mde"].median())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sim")
    s.add_argument("--runs", type=int, default=1000)
    s.add_argument("--samples", type=int, default=500)
    r = sub.add_parser("real")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--pilot-seeds", default="0,1,2")
    r.add_argument("--seeds", type=int, default=10)
    r.add_argument("--set", action="append", default=[])
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--effect", type=float, default=None)
    e = sub.add_parser("eval-days")
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--seeds", default="0,1,2")
    e.add_argument("--days", default="12,14")
    e.add_argument("--more", default="12,16")
    e.add_argument("--set", action="append", default=[])
    e.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    if args.what == "sim":
        table = run_sim(args.runs, args.samples)
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        result: dict = {"sim": table.to_dict(orient="records")}
    elif args.what == "eval-days":
        days = tuple(int(x) for x in args.days.split(","))
        more = tuple(int(x) for x in args.more.split(","))
        result = run_eval_days(args.out, [int(x) for x in args.seeds.split(",")], args.set,
                               args.threads, days, more)  # type: ignore[arg-type]
        print(json.dumps(result, indent=2, default=float))
    else:
        result = run_real(args.out, [int(x) for x in args.pilot_seeds.split(",")], args.seeds,
                          args.set, args.threads, args.effect)
        print(json.dumps(result, indent=2, default=float))
    print(f"{time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), **result},
                                        indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())

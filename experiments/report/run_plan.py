"""``gemkd plan``: how many seeds, evaluation users or worlds a run would need to resolve an
effect (DESIGN §6), from the run's own variance components.

A run's interval is ``θ̂ ± c · SE`` with ``SE² = (τ² + V_a/k + (V_b/k + V_e)/S) / W``
(:mod:`gemkd.transfer.metrics.power`): more seeds shrink the seeds' part and the users' noise that
differs by seed, more evaluation users (×k: new users, not more days of the same ones, whose
effect persists) both user parts, more worlds everything and buy degrees of freedom (W ≥ 2: the
worlds' t with W − 1 df). The planner measures the components on the run (the median over the
slice's variants, or one variant's), then for each way of growing finds the smallest size whose
predicted MDE at the wanted power is at most the effect, with its expected half-width and cost.
Its predictions are checked against reruns: tests/experiments/report/test_run_plan.py (the
null simulation's known components) and benchmarks/plan_validation.py (a real pilot and its
rerun).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from gemkd.experiments.report.no_signal import mde_caveat, no_signal_tasks
from gemkd.experiments.report.sensitivity import components_of
from gemkd.experiments.report.summary import f4, lag_str, md_table
from gemkd.experiments.run_dir.results_schema import BASELINE
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.power import POWER, Components, Prediction, predict

if TYPE_CHECKING:
    from gemkd.experiments.report.summary import RunView

#: The largest size the planner tries per factor (seeds, worlds, users ×).
LIMIT = 10_000
NAMES = {"delta_ne": "ΔNE", "vs_kd": "ΔNE − ΔNE(KD)"}
OPTION_COLUMNS = ["stat", "option", "worlds", "seeds", "users_factor", "eval_users",
                  "eval_rows", "interval", "half_width", "mde", "reached", "final_runs",
                  "runs_with_search"]


@dataclass(frozen=True)
class Plan:
    """The options (:data:`OPTION_COLUMNS`, a row per contrast and way of growing) that resolve
    ``effect`` at ``power`` and two-sided ``alpha``, and the components they were planned from."""

    effect: float
    power: float
    alpha: float
    run: str
    where: str
    size: str
    options: pd.DataFrame
    components: dict[str, Components]
    notes: list[str] = field(default_factory=list)

    @property
    def one_world(self) -> bool:
        """Whether the run has one world (its worlds' variance is not measured)."""
        return all(c.n_worlds < 2 for c in self.components.values())

    def text(self) -> str:
        """The plan as the command prints it."""
        lines = [f"Plan for an effect of {self.effect:g} NE at {100 * self.power:.0f} % power, "
                 f"two-sided α = {self.alpha:.4g} ({self.where}; the run: {self.size})."]
        for stat, c in self.components.items():
            split = c.split()
            lines += ["", f"{NAMES[stat]}: variance of the run's estimate (NE²): users "
                      f"{split['users']:.3g}, seeds {split['seeds']:.3g}, worlds "
                      + (f"{split['worlds']:.3g}" if math.isfinite(split["worlds"])
                         else "not estimable (one world)"), ""]
            rows = []
            for _, r in self.options[self.options["stat"] == stat].iterrows():
                rows.append([r["option"], f"{r['worlds']:,}", f"{r['seeds']:,}",
                             f"{_factor(r['users_factor'])} ({r['eval_users']:,.0f})",
                             f"{r['eval_rows']:,.0f}", r["interval"],
                             f"±{f4(r['half_width'])}", f4(r["mde"]),
                             "yes" if r["reached"] else
                             "no" if r["option"] == "as run" else f"no (limit {LIMIT:,})",
                             f"{r['final_runs']:,}", f"{r['runs_with_search']:,}"])
            lines.append(md_table(("option", "worlds", "seeds", "eval users", "eval rows",
                                   "interval", "expected half-width", "MDE", "resolves it",
                                   "final runs", "runs with search"), rows))
        lines += [""] + self.notes if self.notes else []
        return "\n".join(lines)

    def summary(self) -> str:
        """One sentence for the report: what each way of growing needs."""
        parts = []
        stat = next(iter(self.components))
        opts = self.options[self.options["stat"] == stat].set_index("option")
        together = next((o for o in opts.index if o.endswith("×m")), None)
        for name, what in (("seeds only", "seeds"), ("users only", "users_factor"),
                           ("worlds only", "worlds"), (together, "all")):
            if name not in opts.index:
                continue
            r = opts.loc[name]
            if not r["reached"]:
                parts.append(f"{name}: not within {LIMIT:,}")
            elif what == "users_factor":
                parts.append(f"users only: {_factor(r['users_factor'])} the evaluation users")
            elif what == "all" and r["worlds"] < 2:
                parts.append(f"seeds and users together (this one world): {r['seeds']:,} seeds "
                             f"and {_factor(r['users_factor'])} the users")
            elif what == "all":
                parts.append(f"together: {r['worlds']:,} world(s), {r['seeds']:,} seeds and "
                             f"{_factor(r['users_factor'])} the users")
            elif what == "worlds" and self.one_world:
                parts.append(f"worlds only: {r['worlds']:,} replicate worlds, which this run "
                             "does not have (for a real log: other logs or periods)")
            else:
                parts.append(f"{name}: {r[what]:,} {what}")
        return (f"To detect {NAMES[stat]} = {self.effect:g} (about what an ads team acts on, "
                f"0.1 % relative) at {100 * self.power:.0f} % power: {'; '.join(parts)} "
                f"(`gemkd plan {self.run} --effect {self.effect:g}`; "
                + ("worlds assume no world effect: one world cannot measure it; "
                   if any(n.startswith("Worlds") for n in self.notes) else "")
                + "final runs and evaluation rows per option there).")


def plan_run(run_dir: str | Path, effect: float, power: float = POWER, alpha: float = 0.05,
             task: str | None = None, domain: str | None = None, lag: Any = None,
             variant: str | None = None, stat: str = "both", holm: bool = False) -> Plan:
    """How many seeds, evaluation users or worlds would resolve ``effect`` (``gemkd plan``).

    Parameters
    ----------
    run_dir
        A ``gemkd run`` directory with per-user evaluation files and at least 2 seeds in a world
        (the seeds' variance is measured from them).
    effect
        The true difference in NE to resolve (> 0), e.g. 0.001 (0.1 % relative at NE ~1).
    power
        The probability the interval should exclude 0 at that effect.
    alpha
        The two-sided level (the report's: 1 − its level).
    task, domain, lag
        The slice (default: the report's main one).
    variant
        Plan for this variant's components (default: their median over the slice's variants).
    stat
        ``delta_ne``, ``vs_kd`` or ``both``.
    holm
        Plan at α/m, Holm's strictest step for a primary family of m comparisons.

    Returns
    -------
    Plan

    Raises
    ------
    ConfigError
        No per-user files, no world with 2 seeds, an unknown slice or variant, or a bad number.
    """
    from gemkd.experiments.report.summary import RunView

    if not effect > 0:
        raise ConfigError(f"--effect must be > 0, got {effect}")
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise ConfigError(f"--power and --alpha must lie in (0, 1), got {power} and {alpha}")
    if stat not in ("both", *NAMES):
        raise ConfigError(f"--stat must be both, delta_ne or vs_kd, got {stat!r}")
    run = RunView(run_dir)
    if holm:
        fam = run.family
        if fam is None or not fam.size:
            raise ConfigError(f"{run.dir}: --holm needs a primary family; this run has none")
        alpha = alpha / fam.size
    plan = plan_for(run, effect, power, alpha, task, domain, lag, variant, stat, strict=True)
    assert plan is not None  # strict: an error instead
    return plan


def plan_for(run: RunView, effect: float, power: float = POWER, alpha: float = 0.05,
             task: str | None = None, domain: str | None = None, lag: Any = None,
             variant: str | None = None, stat: str = "both", strict: bool = False
             ) -> Plan | None:
    """:func:`plan_run` on a loaded run; None (``strict``: an error) where it cannot plan."""
    def fail(msg: str) -> None:
        if strict:
            raise ConfigError(f"{run.dir}: {msg}")

    if not run.has_intervals:
        fail("no per-user evaluation files (clusters/): no variance to plan from")
        return None
    for name, value, known in (("task", task, run.tasks), ("domain", domain, run.domains),
                               ("lag", lag, run.lags)):
        if value is not None and value not in known:
            fail(f"--{name} {value!r}: the run has {', '.join(map(str, known))}")
            return None
    frame = run.sensitivity
    frame = frame[(frame["teacher_lag_days"] == (run.lag if lag is None else lag))
                  & (frame["domain"] == (domain or run.domain))
                  & (frame["task"] == (task or run.task))]
    if variant is not None:
        if variant not in set(frame["variant"]):
            fail(f"--variant {variant!r}: the run has {', '.join(run.variants)}")
            return None
        frame = frame[frame["variant"] == variant]
    stats = list(NAMES) if stat == "both" else [stat]
    comps: dict[str, Components] = {}
    for s in stats:
        own = BASELINE if s == "delta_ne" else run.intervals.reference
        rows = frame[frame["variant"] != own]
        if rows.empty or rows[f"{s}_users_shared"].isna().all():
            continue
        c = components_of(rows, s)
        if not math.isfinite(c.seeds):
            fail("every world has one seed: the seeds' variance is not measured; run at least "
                 "2 seeds (3 or more: its estimate has S − 1 df) to plan")
            return None
        comps[s] = c
    if not comps:
        fail(f"no {' or '.join(NAMES[s] for s in stats)} to plan for in this slice")
        return None
    spec = run.spec or {}
    n_variants, n_lags = len(run.variants), len(run.lags)
    tuning = spec.get("tuning") or {}
    per_trial = int(tuning.get("trials", 8)) * int(tuning.get("seeds", 1))
    per_seed = tuning.get("draws", "per_seed") == "per_seed"
    users, rows_per_world = float(frame["n_users"].iloc[0]), float(frame["eval_rows"].iloc[0])
    options = []
    for s, c in comps.items():
        for name, pred, reached in _options(c, effect, power, alpha):
            final = n_variants * pred.seeds * pred.worlds * n_lags
            search = n_variants * pred.worlds * n_lags * per_trial * (
                pred.seeds if per_seed else 1)
            options.append({
                "stat": s, "option": name, "worlds": pred.worlds, "seeds": pred.seeds,
                "users_factor": pred.users, "eval_users": users * pred.users,
                "eval_rows": rows_per_world * pred.users * pred.worlds,
                "interval": pred.method, "half_width": pred.half_width, "mde": pred.mde,
                "reached": reached, "final_runs": final, "runs_with_search": final + search})
    c0 = next(iter(comps.values()))
    notes = [
        "Predictions assume the components stay as measured: users' variance scales with "
        "1/users (new, independent users; more days of the same users help less), seeds' with "
        "1/seeds, worlds' with 1/worlds; an estimate from few seeds (S − 1 df) or worlds is "
        "itself noisy, so the sizes are a guide, not a guarantee (DESIGN §6). 'as run' is what "
        "a run of this size gives on average; report.md's half-width is this run's own draw."]
    if c0.n_worlds < 2:
        notes.append("Worlds: this run has one world, so the worlds' variance is not measured "
                     "and the options with more worlds assume it is 0 (they are optimistic if "
                     "worlds differ); 'worlds only' needs replicate worlds the run does not "
                     "have (for a real log: other logs or periods), while every other option "
                     "keeps this one world.")
    main = domain in (None, run.domain) and lag in (None, run.lag)  # the constant's slice
    if main and (caveat := mde_caveat(no_signal_tasks(run, [task or run.task]))):
        notes.append(caveat + " 'resolves it: yes' here is not a reason to trust the run.")
    where = (f"domain {domain or run.domain}, task {task or run.task}, lag "
             f"{lag_str(run.lag if lag is None else lag)}, "
             + (f"variant {variant}" if variant else "median over variants"))
    size = (f"{c0.n_worlds} world(s) × {c0.n_seeds:.3g} seeds, {users:,.0f} evaluation users, "
            f"{n_variants} variants, {n_lags} lag(s)")
    return Plan(effect, power, alpha, str(run.dir), where, size,
                pd.DataFrame(options, columns=OPTION_COLUMNS), comps, notes)


def _options(c: Components, effect: float, power: float, alpha: float
             ) -> list[tuple[str, Prediction, bool]]:
    """The current size and the smallest size per way of growing that resolves ``effect``."""
    w0, s0 = int(c.n_worlds), max(int(round(c.n_seeds)), 1)

    def at(w: int, s: int, k: float) -> Prediction:
        return predict(c, w, s, k, alpha, power)

    out = [("as run", at(w0, s0, 1.0), at(w0, s0, 1.0).mde <= effect)]
    out.append(("seeds only", *_smallest(lambda s: at(w0, int(s), 1.0), s0, effect, True)))
    out.append(("users only", *_smallest(lambda k: at(w0, s0, k), 1.0, effect, False)))
    out.append(("worlds only", *_smallest(lambda w: at(int(w), s0, 1.0), max(w0, 2), effect,
                                          True)))
    if w0 >= 2:  # every factor ×m: the worlds' variance shrinks only with worlds
        out.append(("worlds, seeds and users ×m", *_smallest(
            lambda m: at(math.ceil(w0 * m), math.ceil(s0 * m), m), 1.0, effect, False)))
    else:
        out.append(("seeds and users ×m", *_smallest(
            lambda m: at(w0, math.ceil(s0 * m), m), 1.0, effect, False)))
    return out


def _factor(k: float) -> str:
    """A users' factor as a reader writes it: ×1.5, ×40, ×1,200."""
    return f"×{k:.2g}" if k < 10 else f"×{k:,.0f}"


def _smallest(make, start: float, effect: float, integer: bool) -> tuple[Prediction, bool]:
    """The prediction at the smallest size ≥ ``start`` whose MDE is ≤ ``effect`` (bisection:
    the MDE falls as a size grows), or at :data:`LIMIT` when none is."""
    top = make(LIMIT)
    if top.mde > effect:
        return top, False
    first = make(start)
    if first.mde <= effect:
        return first, True
    lo, hi = float(start), float(LIMIT)
    while (hi - lo > 1) if integer else (hi / lo > 1.01):
        mid = math.floor((lo + hi) / 2) if integer else math.sqrt(lo * hi)
        if make(mid).mde <= effect:
            hi = mid
        else:
            lo = mid
    if not integer:  # a factor a reader can use: rounded up to 2 (else 3) significant digits
        hi = next(x for x in (_ceil_sig(hi, 2), _ceil_sig(hi, 3), hi) if make(x).mde <= effect)
    return make(int(hi) if integer else hi), True


def _ceil_sig(x: float, digits: int) -> float:
    """``x`` rounded up to ``digits`` significant digits."""
    step = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(x / step - 1e-9) * step

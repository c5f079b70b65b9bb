"""Every check of a spec before any work starts (a typo is one error up front, not a failure
after minutes of teacher training that leaves a half-made run directory)."""

from __future__ import annotations

from gemkd.adapters.methods import BUILTIN_METHODS
from gemkd.experiments.run.data_sources import data_plan
from gemkd.experiments.run.methods import check_variant, method_class, search_space, variant_needs
from gemkd.experiments.run.spec_plan import RunPlan, held_out_days, needs_epochs, teacher_seen
from gemkd.experiments.run.teacher_steps import teacher_config, teacher_values
from gemkd.experiments.run.tuning import check_draws
from gemkd.experiments.spec.run_spec import PluginSpec, RunSpec
from gemkd.transfer.errors import ConfigError


def plan_run(spec: RunSpec) -> RunPlan:
    """The run's :class:`RunPlan`: the teacher config's epochs (read once, where the held-out
    days depend on them), the validation days, each lag's teacher days and the teacher and
    domain-FM configs each lag's fit steps train (built, so checked, here)."""
    epochs = (int(teacher_values(spec, spec.teacher).get("max_epochs", 1))
              if needs_epochs(spec) else None)
    val = held_out_days(spec, epochs)
    teachers = ({} if spec.teacher.store is not None
                else {lag: teacher_config(spec, lag, spec.teacher, val) for lag in spec.lags})
    fms = ({lag: teacher_config(spec, lag, spec.hierarchical, val) for lag in spec.lags}
           if any(v.teacher == "domain_fm" for v in spec.variants) else {})
    return RunPlan(val, {lag: teacher_seen(spec, lag, val) for lag in spec.lags}, teachers, fms)


def check_spec(spec: RunSpec) -> RunPlan:
    """Build every section once: data source (and, where the config alone tells them, its days
    and domains against the spec's windows and student_domain), teacher configs per lag, the
    hierarchical FM's, every variant's methods and tuning lists, the student class and its
    init_args, an imported store's manifest. Returns the run's plan (:func:`plan_run`)."""
    from gemkd.students.student_registry import check_init_args, resolve_student_class

    data = data_plan(spec)
    check_data(spec, data.days, data.domains, data.tasks, data_name(spec))
    run_plan = plan_run(spec)
    for lag, fm in run_plan.domain_fms.items():
        if fm.init_from == "gem":
            check_warm_start(spec, fm, run_plan.teachers.get(lag))
    if spec.teacher.store is not None:
        from gemkd.transfer.io import fs
        from gemkd.transfer.store import Manifest

        Manifest.load(fs.as_where(spec.teacher.store))  # there, and a finished export
        if spec.teacher.overrides or len(spec.lags) > 1:
            raise ConfigError("spec teacher.store: an imported store is one fixed teacher; "
                              "it takes no teacher.overrides and no lag sweep")
        sharing = [v.name for v in spec.variants if "teacher_weights" in variant_needs(v)]
        if sharing:
            raise ConfigError(f"spec variants: {', '.join(sharing)} start the student from the "
                              "teacher's weights (param_share), and the imported teacher.store "
                              "has no checkpoint: drop the variant or train the teacher")
    speculating = [v.name for v in spec.variants if "pairs" in variant_needs(v)]
    if speculating and spec.teacher.store is not None:
        raise ConfigError(f"spec variants: {', '.join(speculating)} precompute SOLARIS pairs "
                          "with the teacher (solaris), and the imported teacher.store has no "
                          "checkpoint to run: drop the variant or train the teacher")
    if speculating:
        from gemkd.transfer.solaris import build_policy

        build_policy(spec.solaris.policy.class_path, spec.solaris.policy.init_args)
    names = spec.variant_names
    if len(set(names)) != len(names):
        raise ConfigError(f"spec variants: a variant is named twice in {names}")
    # a list for a knob that no variant of this run tunes is fine (variants trimmed with --set);
    # one that no method knows is a typo
    builtin = {k for name in BUILTIN_METHODS for k in method_class(PluginSpec(name)).tunable}
    used: set[str] = set()
    for variant in spec.variants:
        check_variant(spec, variant)
        used |= set(search_space(spec, variant))
    check_draws(spec)
    unknown = sorted(set(spec.tuning.knobs) - builtin - used)
    if unknown:
        raise ConfigError(f"spec tuning.knobs: unknown knob {unknown[0]!r}; this spec's variants "
                          f"tune: {', '.join(sorted(used)) or 'nothing'}")
    init_args = dict(spec.student.init_args)
    if any("codes" in variant_needs(v) for v in spec.variants):
        init_args["repr_dim"] = spec.repr.code_dim
    check_init_args(resolve_student_class(spec.student.class_path), init_args)
    return run_plan


def check_warm_start(spec: RunSpec, fm, gem) -> None:
    """``hierarchical.overrides.init_from: gem`` needs a GEM checkpoint (``gem`` None: an
    imported store has none) of the same architecture as the FM config (else the weights cannot
    load, minutes in)."""
    if gem is None:
        raise ConfigError("spec hierarchical.overrides.init_from: gem starts the domain FMs "
                          "from the run's GEM checkpoint, and an imported teacher.store has "
                          "none (give a checkpoint path, or leave init_from out)")
    if (fm.class_path, fm.model) != (gem.class_path, gem.model):
        keys = sorted(k for k in set(fm.model) | set(gem.model)
                      if fm.model.get(k) != gem.model.get(k))
        raise ConfigError(f"spec hierarchical.overrides.init_from: gem needs the domain FM to "
                          f"be built as the teacher is (config {spec.hierarchical.config!r} vs "
                          f"{spec.teacher.config!r}: class {fm.class_path} vs {gem.class_path}"
                          f"{'; model keys ' + ', '.join(keys[:5]) if keys else ''} differ); "
                          f"set hierarchical.config to the teacher's config")


class DataMismatch(ConfigError):
    """The spec does not fit the data, found once the data was built (real data)."""


def check_data(spec: RunSpec, days: list[int] | None, domains: list[str] | None,
               tasks: list[str] | None, where: object, mismatch: bool = False) -> None:
    """The spec's day windows lie inside the data's days, its student_domain is one of the
    data's domains and its student_tasks are the data's tasks (nothing is clipped to what
    exists; None: not known yet, checked once the data is built); ``mismatch``: raise
    DataMismatch."""
    from gemkd.transfer.data.schema import check_domain, check_window

    try:
        if days is not None:
            if spec.teacher.store is None:
                for key, window in teacher_windows(spec):
                    check_window(key, window, days, where)
            check_window("student_days", spec.student_days, days, where)
            check_window("eval_days", spec.eval_days, days, where)
        if spec.student_domain is not None and domains is not None:
            check_domain("student_domain", spec.student_domain, domains, where)
        unknown = [t for t in spec.student_tasks if tasks is not None and t not in tasks]
        if unknown and tasks is not None:
            raise ConfigError(f"student_tasks: unknown task {unknown[0]!r}; {where} has tasks "
                              f"{', '.join(tasks)}")
    except ConfigError as e:
        if mismatch:
            raise DataMismatch(str(e)) from None
        raise


def teacher_windows(spec: RunSpec) -> list[tuple[str, tuple[int, int]]]:
    """The day windows the teachers of ``spec`` read, each with the keys that set it (for an
    error): every lag's window (DESIGN §6.1: ``[T - L - W, T - L)``, all days before T - L
    when W is unset) and, under streaming, the pass ``[teacher_stream_start, T)``. Only these
    must be in the data: days before the window (a log's stray early rows) need not be."""
    t, w = spec.teacher_days, spec.teacher_window_days
    out: dict[tuple[int, int], str] = {}
    if spec.teacher_protocol == "streaming":
        start = spec.teacher_stream_start
        out[(start, t)] = ("teacher_days" if not start else
                           f"teacher_stream_start {start} to teacher_days {t}")
    for lag in spec.lags:
        window = spec.teacher_window(lag)
        if window == (0, t):
            out.setdefault(window, "teacher_days")
        else:
            lagged = f" - teacher_lag_days {lag}" if lag else ""
            size = f" - teacher_window_days {w}" if w is not None else ""
            out.setdefault(window, f"teacher window (teacher_days {t}{lagged}{size})")
    return [(key, window) for window, key in out.items()]


def read_days(spec: RunSpec) -> tuple[int, int]:
    """The half-open days a run reads: from the first day a teacher (or the student) reads to
    the last evaluation day (what :func:`gemkd.transfer.data.audit.check_days` verifies)."""
    firsts = [spec.student_days[0], spec.eval_days[0]]
    if spec.teacher.store is None:
        firsts += [window[0] for _, window in teacher_windows(spec)]
    return min(firsts), spec.eval_days[1]


def data_name(spec: RunSpec) -> str:
    d = spec.data
    if d.source == "synthetic":
        return f"spec data (synthetic, preset {d.preset or 'small'})"
    return f"spec data ({d.source}{', ' + d.src if d.src else ''})"

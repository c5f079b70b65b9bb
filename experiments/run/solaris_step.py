"""The SOLARIS pair step of a run (cached): which teacher precomputes each student and
evaluation day, and :func:`~gemkd.experiments.run.solaris_precompute.precompute_pairs` over them.

Which teacher: the pairs of day d are computed as of the end of d − 1 by the freshest teacher
that exists then. Under ``teacher_protocol: streaming`` that is the daily checkpoint of
``min(d − 1, teacher_days − 1)`` (the stream ends at ``teacher_days``): fresher than a lag-L
teacher for L > 0, the same model at lag 0. Under ``window`` there is one fit per lag, so it is
the lag's own teacher.
"""

from __future__ import annotations

from pathlib import Path

from gemkd.experiments.run.cache import cached_step, plugin_key
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import GemkdError
from gemkd.transfer.solaris import build_policy, item_feature


def pair_checkpoint(spec: RunSpec, gem_run: Path, lag_ckpt: Path, day: int) -> Path:
    """The checkpoint that precomputes day ``day``'s pairs (module docstring)."""
    from gemkd.transfer.teacher_fit_dir import TeacherFitDir

    if spec.teacher_protocol != "streaming":
        return lag_ckpt
    ckpt = TeacherFitDir(gem_run).day(min(day - 1, spec.teacher_days - 1))
    if not ckpt.is_file():
        raise GemkdError(f"{ckpt}: the streaming teacher has no checkpoint to precompute the "
                         f"SOLARIS pairs of day {day}")
    return ckpt


def build_pairs(spec: RunSpec, data: Path, gem_run: Path, lag_ckpt: Path, layer: str,
                cache: Path, log) -> Path:
    """The pair store of every student and evaluation day (a cached step named by the teacher
    fit, the checkpoints, the layer, the policy and K)."""
    from gemkd.experiments.run.solaris_precompute import precompute_pairs

    sol = spec.solaris
    days = list(range(spec.student_days[0], spec.eval_days[1]))
    ckpts = {d: pair_checkpoint(spec, gem_run, lag_ckpt, d) for d in days}
    item = item_feature(DatasetSchema.load(data), sol.item_feature)
    policy = build_policy(sol.policy.class_path, sol.policy.init_args)
    key = {"teacher": gem_run.parent.name, "layer": layer, "k": sol.k, "item": item,
           "policy": sol.policy.to_dict(), "domain": spec.student_domain,
           "checkpoints": {str(d): c.name for d, c in ckpts.items()},
           **plugin_key([sol.policy.class_path])}

    def run(step: Path) -> None:
        precompute_pairs(data, days, ckpts, policy, sol.k, layer, step / "pairs", item=item,
                         served_domain=spec.student_domain, log=log)

    return cached_step(cache, "pairs", key, run, log) / "pairs"

"""Hierarchical transfer's middle tier (DESIGN §5): one mid-size FM per domain, each trained on
its own domain's traffic with labels plus KD from GEM's store; their predictions form the store
that the domain's vertical models distil from (GEM → domain FM → VM).

The FMs are exported together through :class:`PerDomainModels`, which answers every row with its
own domain's FM, so the store is one ordinary teacher-output store (one manifest, one version).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gemkd.experiments.run.cache import cached_step, plugin_key
from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig
from gemkd.transfer.io import fs
from gemkd.transfer.models import TeacherOutput


class PerDomainModels(torch.nn.Module):
    """``{"logits", "repr"}`` of each row from the FM of the row's domain.

    Every FM runs on the whole batch and rows are picked by domain: K× the compute of one FM at
    export time, but no re-packing of jagged histories into per-domain sub-batches."""

    def __init__(self, models: dict[int, torch.nn.Module]) -> None:
        super().__init__()
        self.domain_ids = sorted(models)
        self.models = torch.nn.ModuleDict({str(d): models[d] for d in self.domain_ids})

    def forward(self, batch) -> TeacherOutput:
        outs = {d: self.models[str(d)](batch) for d in self.domain_ids}
        first = outs[self.domain_ids[0]]
        logits = first.logits.clone()
        reprs = {k: v.clone() for k, v in first.repr.items()}
        for d in self.domain_ids[1:]:
            rows = batch.domain == d
            logits[rows] = outs[d].logits[rows]
            for k in reprs:
                reprs[k][rows] = outs[d].repr[k][rows]
        return TeacherOutput(logits=logits, repr=reprs)

    def representation_dims(self) -> dict[str, int]:
        first: Any = self.models[str(self.domain_ids[0])]  # a teacher: the contract is duck-typed
        return first.representation_dims()


def fit_domain_fms(cfg: TeacherTrainConfig, data: Path, data_key: dict, gem_store: fs.Where,
                   domains: list[str], cache: Path, log,
                   days: tuple[int, int] | None = None) -> Path:
    """Train one FM per name in ``domains`` on that domain's teacher-day rows (labels + KD from
    ``gem_store``), export them over those domains' rows of ``days`` (default every day);
    return the store path.

    Each FM is a teacher fit (:func:`~gemkd.experiments.teacher.teacher_fit.fit_teacher` into
    ``fit/<domain>`` of the step, resumable, every key of ``cfg`` honoured), rebuilt from its
    checkpoint (:func:`~gemkd.experiments.teacher.teacher_config.load_teacher`) and exported
    with the others through :func:`~gemkd.experiments.teacher.teacher_export.export_model`."""
    from gemkd.experiments.teacher.teacher_config import cache_key, load_teacher
    from gemkd.experiments.teacher.teacher_export import export_model
    from gemkd.experiments.teacher.teacher_fit import fit_teacher
    from gemkd.transfer.data.schema import DatasetSchema
    from gemkd.transfer.store import weights_hash

    fm = cache_key(cfg)
    if cfg.init_from is not None:  # the GEM checkpoint by its step name, not where cache lives
        fm["init_from"] = "/".join(Path(cfg.init_from).parts[-4:])
    key = {"data": data_key, "fm": fm,
           "gem_store": fs.name(fs.parent(gem_store)), "domains": list(domains),
           **plugin_key([cfg.class_path])}
    if days is not None:
        key["days"] = list(days)

    def run(step: Path) -> None:
        schema = DatasetSchema.load(data)
        models = {}
        for domain in domains:
            summary = fit_teacher(cfg, data, step / "fit" / domain, resume=True, progress=False,
                                  domains=[domain], distill_from=gem_store)
            first, end = cfg.train_days
            log(f"  domain FM {domain}: trained on days [{first}, {end})")
            models[schema.domains.index(domain)] = load_teacher(summary["checkpoint"], data).model
        model = PerDomainModels(models)
        export_model(model, cfg, data, step / "store",
                     teacher_name=f"{cfg.name}[{','.join(domains)}]",
                     teacher_version=weights_hash(model.state_dict()), domains=list(domains),
                     days=days, overwrite=True, progress=False)

    return cached_step(cache, "domain_fm", key, run, log) / "store"

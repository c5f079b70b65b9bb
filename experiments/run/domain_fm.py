"""Hierarchical transfer's middle tier (DESIGN §5): one mid-size FM per domain, each trained on
its own domain's traffic with labels plus KD from GEM's store; their predictions form the store
that the domain's vertical models distil from (GEM → domain FM → VM).

The FMs are exported together through :class:`PerDomainModels`, which answers every row with its
own domain's FM, so the store is one ordinary teacher-output store (one manifest, one version).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from experiments.run.cache import cached_step, plugin_key
from experiments.teacher_config import TeacherTrainConfig
from transfer.io import fs
from transfer.models import TeacherOutput


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
        return self.models[str(self.domain_ids[0])].representation_dims()


def fit_domain_fms(cfg: TeacherTrainConfig, data: Path, data_key: dict, gem_store: Path,
                   domains: list[str], cache: Path, log) -> Path:
    """Train one FM per name in ``domains`` on that domain's teacher-day rows (labels + KD from
    ``gem_store``), export them over those domains' rows of every day; return the store path."""
    import lightning.pytorch as pl

    from experiments.teacher_config import build_model
    from transfer.data.datamodule import AdsDataModule
    from transfer.data.schema import DatasetSchema
    from transfer.distill import DistillModule, StoreTeacher
    from transfer.methods import KD
    from transfer.store import StoreCallback, TeacherStore, weights_hash
    from transfer.training import RankingModule, training_base_rates

    fm = dataclasses.asdict(cfg)
    if cfg.init_from is not None:  # the GEM checkpoint by its step name, not where cache lives
        fm["init_from"] = "/".join(Path(cfg.init_from).parts[-4:])
    key = {"data": data_key, "fm": fm,
           "gem_store": fs.name(fs.parent(gem_store)), "domains": list(domains),
           **plugin_key([cfg.class_path])}
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                 enable_model_summary=False, accelerator="cpu")

    def fit_one(schema: DatasetSchema, domain: str) -> torch.nn.Module:
        pl.seed_everything(cfg.seed, verbose=False)
        tasks, train = schema.tasks, tuple(cfg.train_days)
        model = build_model(cfg, schema)
        module = DistillModule(
            model, tasks, schema.domains, methods=[KD(kd_weight=1.0)],
            teacher=StoreTeacher(TeacherStore(gem_store), tasks), lr=cfg.lr,
            embedding_lr=cfg.embedding_lr,
            base_rates=training_base_rates(data, train, tasks, [domain]), compute_auc=False)
        dm = AdsDataModule(data, train_days=train, batch_size=cfg.batch_size, seed=cfg.seed,
                           max_seq_len=cfg.max_seq_len, domains=[domain])
        # no validation days: limit_val_batches=0, or Lightning sizes the empty val loader
        pl.Trainer(max_epochs=cfg.max_epochs, limit_val_batches=0, **quiet).fit(
            module, datamodule=dm)
        log(f"  domain FM {domain}: trained on days {list(train)}")
        return model

    def run(step: Path) -> None:
        schema = DatasetSchema.load(data)
        models = {schema.domains.index(d): fit_one(schema, d) for d in domains}
        model = PerDomainModels(models).eval()
        layer = "trunk"
        callback = StoreCallback(step / "store", schema.tasks, layer,
                                 model.representation_dims()[layer], "float16",
                                 teacher_name=f"{cfg.name}[{','.join(domains)}]",
                                 teacher_version=weights_hash(model.state_dict()),
                                 trained_until_day=cfg.train_days[1] - 1, overwrite=True)
        predict = AdsDataModule(data, batch_size=4096, shuffle=False,
                                max_seq_len=cfg.max_seq_len, domains=list(domains))
        with torch.inference_mode():
            pl.Trainer(callbacks=[callback], **quiet).predict(
                RankingModule(model, schema.tasks, schema.domains, repr_layer=layer),
                datamodule=predict, return_predictions=False)

    return cached_step(cache, "domain_fm", key, run, log) / "store"


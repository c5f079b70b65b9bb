"""``RankingModule``: the LightningModule that trains any multi-task ranking model.

The wrapped model is any teacher (:mod:`gemkd.transfer.models`): ``forward(batch)`` returns a
``TeacherOutput`` (``logits [B, n_tasks]``, ``repr {name: [B, dim]}``).
The module owns the loss (per-task BCE-with-logits, weighted, optional label mask), the two
AdamW parameter groups (embedding tables vs dense weights), evaluation metrics
(:class:`gemkd.transfer.metrics.RankingMetrics`), the prediction rows a teacher-output store writer
consumes, and FSDP2 sharding under Lightning's ``ModelParallelStrategy``.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.metrics import RankingMetrics
from gemkd.transfer.metrics.numerics import logit
from gemkd.transfer.models import TeacherOutput, fsdp_units, start_output_bias
from gemkd.transfer.packs.member_wise import member_wise
from gemkd.transfer.training.compile_cache import use_compile_cache
from gemkd.transfer.training.flat_adamw import FlatAdamW
from gemkd.transfer.training.table_optim import (
    ROW_RULES,
    ROW_WISE_MIN_ROWS,
    check_table_optimizer,
    clip_grad_norm_,
    id_tables,
    set_sparse_tables,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def fsdp_mesh(device_mesh: DeviceMesh) -> DeviceMesh:
    """The mesh ``fully_shard`` should use: the (replicate, shard) 2-D sub-mesh when the mesh has
    both dimensions (hybrid sharding), else the ``data_parallel`` dimension (Lightning's
    ``ModelParallelStrategy`` mesh is ``(data_parallel, tensor_parallel)``)."""
    names = tuple(device_mesh.mesh_dim_names or ())
    replicate = [n for n in names if "replicate" in n]
    shard = [n for n in names if "shard" in n and n not in replicate]
    if replicate and shard:
        return device_mesh[(replicate[0], shard[0])]
    if "data_parallel" in names:
        return device_mesh["data_parallel"]
    if device_mesh.ndim == 1:
        return device_mesh
    raise ValueError(f"cannot pick a data-parallel dimension from mesh dims {names}")


def shard_model(model: nn.Module, mesh, **fsdp_kwargs: Any) -> nn.Module:
    """FSDP2: ``fully_shard`` every unit of ``model`` (:func:`gemkd.transfer.models.fsdp_units`),
    then the root, on ``mesh`` (1-D: FSDP; 2-D: HSDP)."""
    from torch.distributed.fsdp import fully_shard

    for unit in fsdp_units(model):
        fully_shard(unit, mesh=mesh, **fsdp_kwargs)
    fully_shard(model, mesh=mesh, **fsdp_kwargs)
    return model


def embedding_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters of every ``nn.Embedding`` in ``model`` (each once)."""
    params, seen = [], set()
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            for p in m.parameters(recurse=False):
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
    return params


class RankingModule(pl.LightningModule):
    """Train/evaluate/predict with a multi-task, multi-domain ranking ``model``.

    * ``tasks`` / ``domains``: names, in the order of the logits columns / domain ids.
    * ``task_weights``: ``{task: weight}`` (missing tasks weigh 1); loss = Σ_t w_t · BCE_t where
      BCE_t is the mean over the rows whose label for task t is present.
    * Label mask: ``batch.meta["label_mask"]`` ([B, T] bool) when given; with
      ``mask_nan_labels=True`` non-finite labels count as missing too.
    * Optimiser: AdamW with two groups, ``embedding`` (every ``nn.Embedding`` parameter,
      ``embedding_lr`` (default ``10 * lr``), ``embedding_weight_decay`` (default 0)) and
      ``dense`` (the rest, ``lr``, ``weight_decay``); torch's foreach AdamW with each group in
      one buffer (:class:`~gemkd.transfer.training.flat_adamw.FlatAdamW`, the same updates).
      ``table_optimizer`` ``rowwise_adagrad`` or ``sparse_adam`` moves the ID tables
      (:func:`~gemkd.transfer.training.table_optim.id_tables`) into a ``table`` group updated
      row-wise over row-sparse gradients (at ``embedding_lr``, ``embedding_weight_decay``;
      tables of fewer than ``table_min_rows`` rows stay dense);
      ``dense_adamw`` (the default) keeps them in the dense AdamW ``embedding`` group.
    * ``base_rates``: ``{task: training positive rate}`` for NE (computed once by the caller, e.g.
      :func:`gemkd.transfer.training.training_base_rates`); ``domain_base_rates``: ``{task:
      {domain: rate}}``, each domain's own p̄ for its NE row
      (:func:`~gemkd.transfer.training.training_rates` gives both; a domain without one takes
      its task's).
    * ``repr_layer``: the named representation returned as ``emb`` by ``predict_step``.
    * ``compile``: ``torch.compile`` the model in place in ``configure_model``, its compiled
      graphs cached on disk across processes
      (:func:`~gemkd.transfer.training.compile_cache.use_compile_cache`).
    * ``init_output_bias``: start a model that has the ``init_output_bias(logit)`` hook
      (:class:`gemkd.transfer.models.OptionalHooks`) at the logit of each task's base rate
      (``base_rates``, when every task has one), as every fresh fit should.
    * ``fsdp_replicate``: under ``ModelParallelStrategy``, ``> 1`` = hybrid sharding (HSDP): the
      data-parallel ranks form a ``(replicate, shard)`` mesh of shape
      ``(fsdp_replicate, dp / fsdp_replicate)``; parameters are sharded within a group and
      replicated across groups (e.g. shard within a node, replicate across nodes).
    """

    #: Constructor arguments that are modules or callables, not hyper-parameters.
    hparams_ignore: tuple[str, ...] = ("model",)
    task_weight: Tensor  # a buffer: [n_tasks]

    def __init__(
        self,
        model: nn.Module,
        tasks: list[str],
        domains: list[str],
        *,
        lr: float = 1e-3,
        embedding_lr: float | None = None,
        weight_decay: float = 0.0,
        embedding_weight_decay: float = 0.0,
        task_weights: Mapping[str, float] | None = None,
        base_rates: Mapping[str, float] | None = None,
        domain_base_rates: Mapping[str, Mapping[str, float]] | None = None,
        repr_layer: str = "trunk",
        compile: bool = False,
        mask_nan_labels: bool = False,
        compute_auc: bool = True,
        fsdp_replicate: int = 1,
        init_output_bias: bool = True,
        table_optimizer: str = "dense_adamw",
        table_min_rows: int = ROW_WISE_MIN_ROWS,
    ) -> None:
        super().__init__()
        self.table_optimizer = check_table_optimizer(table_optimizer)
        if table_min_rows < 0:
            raise ValueError(f"table_min_rows must be >= 0, got {table_min_rows}")
        self.table_min_rows = table_min_rows
        tasks, domains = list(tasks), list(domains)
        task_weights = dict(task_weights or {})
        unknown = sorted(set(task_weights) - set(tasks))
        if unknown:
            raise ValueError(f"task_weights names unknown task(s) {unknown}; tasks are {tasks}")
        self.save_hyperparameters(ignore=list(self.hparams_ignore))
        self.model = model
        self.tasks, self.domains = tasks, domains
        self.lr = lr
        self.embedding_lr = 10 * lr if embedding_lr is None else embedding_lr
        self.weight_decay = weight_decay
        self.embedding_weight_decay = embedding_weight_decay
        self.register_buffer(
            "task_weight", torch.tensor([float(task_weights.get(t, 1.0)) for t in tasks]),
            persistent=False,
        )
        self.base_rates = dict(base_rates or {})
        self.domain_base_rates = {t: dict(r) for t, r in (domain_base_rates or {}).items()}
        self.repr_layer = repr_layer
        self.compile_model = compile  # not ``compile``: that is nn.Module's method
        self.mask_nan_labels = mask_nan_labels
        if fsdp_replicate < 1:
            raise ValueError(f"fsdp_replicate must be >= 1, got {fsdp_replicate}")
        self.fsdp_replicate = fsdp_replicate
        metric_args: dict[str, Any] = dict(
            tasks=tasks, n_domains=len(domains), domain_names=domains, base_rates=self.base_rates,
            compute_auc=compute_auc, domain_base_rates=self.domain_base_rates)
        self.start_at_base_rate = init_output_bias  # DistillModule starts its methods' heads too
        if init_output_bias:  # a resumed fit then loads its own weights over them
            start_output_bias(self.model, self.base_rate_logits())
        self.val_metrics = RankingMetrics(**metric_args)
        self.test_metrics = RankingMetrics(**metric_args)
        #: The latest computed metrics per split, keys ``{metric}/{task}/{domain}``.
        self.last_metrics: dict[str, dict[str, float]] = {}
        self._configured = False

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning sets ``_current_fx_name`` twice around every hook it calls (~20 times a
        # training step); nn.Module's __setattr__ first checks each value against parameters,
        # buffers and submodules (~1.5 us, their metaclasses' isinstance in Python). A hook name
        # is none of those, and the attribute is never registered as one: it is stored as
        # nn.Module would store it, directly.
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def base_rate_logits(self) -> torch.Tensor | None:
        """``[n_tasks]`` logits of the training base rates; None unless every task has one."""
        if any(t not in self.base_rates for t in self.tasks):
            return None
        return logit(torch.tensor([self.base_rates[t] for t in self.tasks]))

    # ------------------------------------------------------------------ model set-up
    def configure_model(self) -> None:
        if self._configured:
            return
        self._configured = True
        trainer = self._trainer
        if trainer is not None and isinstance(trainer.strategy, ModelParallelStrategy):
            shard_model(self.model, self.fsdp_device_mesh())
        if self.compile_model:
            use_compile_cache()  # compiled graphs outlive the process (compile_cache.py)
            self.model.compile()

    def fsdp_device_mesh(self) -> DeviceMesh:
        """The mesh ``fully_shard`` uses: Lightning's ``data_parallel`` dimension, or with
        ``fsdp_replicate > 1`` a 2-D ``(replicate, shard)`` mesh over the same ranks."""
        if self.device_mesh is None:
            raise RuntimeError("fsdp_device_mesh: no device mesh (ModelParallelStrategy sets it)")
        mesh = fsdp_mesh(self.device_mesh)
        if self.fsdp_replicate == 1 or mesh.ndim == 2:
            return mesh
        from torch.distributed.device_mesh import init_device_mesh

        n = mesh.size()
        if n % self.fsdp_replicate or mesh.size() != self.device_mesh.size():
            raise ValueError(
                f"fsdp_replicate={self.fsdp_replicate} must divide the {n} data-parallel ranks "
                "(and tensor_parallel_size must be 1)")
        return init_device_mesh(mesh.device_type, (self.fsdp_replicate, n // self.fsdp_replicate),
                                mesh_dim_names=("replicate", "shard"))

    def configure_optimizers(self) -> torch.optim.Optimizer | list[torch.optim.Optimizer]:
        return self.student_optimizer()

    def student_optimizer(self) -> FlatAdamW:
        """AdamW over the model: its embedding tables and its other parameters in a group each
        (their own learning rates and weight decays); under a row-wise ``table_optimizer`` the
        ID tables in a third group of their own, updated row-wise (their gradients made
        row-sparse here)."""
        row_wise = self.table_optimizer in ROW_RULES
        set_sparse_tables(self.model, row_wise, self.table_min_rows)
        tables = [t.weight for t in id_tables(self.model, self.table_min_rows)] \
            if row_wise else []
        table_ids = {id(p) for p in tables}
        emb = [p for p in embedding_parameters(self.model) if id(p) not in table_ids]
        emb_ids = {id(p) for p in emb} | table_ids
        dense = [p for p in self.model.parameters() if id(p) not in emb_ids]
        groups = [
            {"name": "table", "params": [p for p in tables if p.requires_grad],
             "lr": self.embedding_lr, "weight_decay": self.embedding_weight_decay,
             "table_rule": self.table_optimizer},
            {"name": "embedding", "params": [p for p in emb if p.requires_grad],
             "lr": self.embedding_lr, "weight_decay": self.embedding_weight_decay},
            {"name": "dense", "params": [p for p in dense if p.requires_grad],
             "lr": self.lr, "weight_decay": self.weight_decay},
        ]
        groups = [g for g in groups if g["params"]]
        # foreach (one multi-tensor op per group, not a Python loop over parameters; torch picks
        # it by default only on CUDA) over one buffer per group: torch's AdamW, bit for bit
        return FlatAdamW(groups, lr=self.lr, foreach=True)

    def clip_gradients(self, optimizer: Any, gradient_clip_val: float | int | None = None,
                       gradient_clip_algorithm: str | None = None) -> None:
        """Lightning's, except that a norm clip runs on :class:`~gemkd.transfer.training.
        flat_adamw.FlatAdamW`'s flat gradient buffers (one norm and one multiply a group, not
        one per tensor: its ``clip_grad_norm_``), and one over row-sparse table gradients
        under another optimiser (which torch's ``clip_grad_norm_`` refuses) runs
        :func:`~gemkd.transfer.training.table_optim.clip_grad_norm_`."""
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            inner = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer's own
            if isinstance(inner, FlatAdamW):
                inner.clip_grad_norm_(float(gradient_clip_val))
                return
            params = [p for g in optimizer.param_groups for p in g["params"]]
            if any(p.grad is not None and p.grad.is_sparse for p in params):
                clip_grad_norm_(params, float(gradient_clip_val))
                return
        super().clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # ------------------------------------------------------------------ loss
    def label_mask(self, batch: Batch) -> Tensor | None:
        mask = batch.meta.get("label_mask") if batch.meta else None
        if self.mask_nan_labels:
            finite = torch.isfinite(batch.labels)
            mask = finite if mask is None else mask & finite
        return mask

    def loss(self, logits: Tensor, labels: Tensor, mask: Tensor | None = None
             ) -> tuple[Tensor, Tensor]:
        """``(weighted total, per-task [T])`` BCE-with-logits; masked entries are ignored. A
        stacked pack's ``logits [K, B, T]`` against the same ``labels [B, T]`` give each
        member's: ``([K], [K, T])``."""
        # a stacked pack's members one at a time, the BCE and its mean (member_wise: each
        # member's numbers its run's)
        per_task = member_wise(lambda x: _per_task(x, labels, mask), logits.float())
        total = (per_task * self.task_weight.to(per_task.dtype)).sum(dim=-1)
        return total, per_task

    def forward(self, batch: Batch) -> TeacherOutput:
        return self.model(batch)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        out = self.model(batch)
        total, per_task = self.loss(out.logits, batch.labels, self.label_mask(batch))
        n = len(batch)
        self.log("train/loss", total, prog_bar=True, batch_size=n)
        for t, name in enumerate(self.tasks):
            self.log(f"train/loss_{name}", per_task[t], batch_size=n)
        return total

    # Lightning reads training_step's signature on every batch (``_TrainingEpochLoop.
    # _build_kwargs``: ``inspect.getfullargspec``, ~25 us); inspect returns a function's
    # ``__signature__`` as it is (PEP 362) instead of building it again
    # (typeshed declares no __signature__ on functions, which inspect reads)
    training_step.__signature__ = inspect.signature(training_step)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ evaluation
    def serving_logits(self, batch: Batch) -> Tensor:
        """The logits that are evaluated (and served); subclasses with other models override."""
        return self.model(batch).logits

    def _eval_step(self, batch: Batch, metrics: RankingMetrics, split: str
                   ) -> dict[str, Tensor | None]:
        """Updates the split's metrics; returns ``{"logits", "mask"}`` (detached) for callbacks
        that keep more than the metrics (e.g. per-user loss sums for a bootstrap)."""
        logits = self.serving_logits(batch)
        mask = self.label_mask(batch)
        total, _ = self.loss(logits, batch.labels, mask)
        self.log(f"{split}/loss", total, batch_size=len(batch), sync_dist=True)
        metrics.update(logits.float(), batch.labels, batch.domain, mask)
        return {"logits": logits.detach().float(), "mask": mask}

    def _eval_end(self, metrics: RankingMetrics, split: str) -> None:
        values = metrics.compute()  # torchmetrics syncs the states across ranks
        metrics.reset()
        self.last_metrics[split] = values
        logged = {f"{split}/{k}": v for k, v in values.items()
                  if k.startswith(("ne/", "auc/", "calibration/"))}
        with warnings.catch_warnings():  # already synced by torchmetrics: no sync_dist needed
            warnings.filterwarnings("ignore", message=".*sync_dist=True.*")
            self.log_dict(logged, sync_dist=False)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, self.val_metrics, "val")

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            self.val_metrics.reset()
            return
        self._eval_end(self.val_metrics, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> dict[str, Tensor | None]:
        return self._eval_step(batch, self.test_metrics, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_end(self.test_metrics, "test")

    # ------------------------------------------------------------------ prediction
    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0
                     ) -> dict[str, Tensor]:
        """Rows for a teacher-output store writer (:data:`gemkd.transfer.store.PREDICTION_KEYS`):
        ids, keys, ``logits [B, T]`` and ``emb [B, dim]`` (the ``repr_layer`` representation),
        detached."""
        out = self.model(batch)
        reprs = out.repr
        if self.repr_layer not in reprs:
            raise KeyError(f"repr_layer {self.repr_layer!r} not in the model's representations "
                           f"{sorted(reprs)}")
        return {
            "example_id": batch.example_id, "day": batch.day, "domain": batch.domain,
            "user_id": batch.user_id, "ts": batch.ts,
            "logits": out.logits.detach().float(),
            "emb": reprs[self.repr_layer].detach().float(),
        }


def _per_task(logits: Tensor, labels: Tensor, mask: Tensor | None) -> Tensor:
    """BCE-with-logits of ``logits [B, T]`` (or ``[1, B, T]``) averaged over the rows, per
    task; masked entries are ignored."""
    if mask is None:
        return F.binary_cross_entropy_with_logits(
            logits, labels.expand_as(logits), reduction="none").mean(dim=-2)
    w = mask.to(logits.dtype)
    y = torch.where(mask, labels, torch.zeros_like(labels)).expand_as(logits)
    bce = F.binary_cross_entropy_with_logits(logits, y, reduction="none") * w
    return bce.sum(dim=-2) / w.sum(dim=0).clamp_min(1.0)

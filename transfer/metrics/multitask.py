"""NE, AUC and calibration for multi-task, multi-domain ranking models (DESIGN §6).

One ``torchmetrics.Metric`` holds everything, so Lightning/DDP sync it like any other metric:

* NE and calibration need only sums, kept per (task, domain) as ``[T, D]`` float64 states
  (``dist_reduce_fx="sum"``); each batch is added with one ``index_add_`` over domain ids.
  Domain "all" is the sum over domains, so it is exactly consistent with the per-domain rows.
* AUC needs every score. Present (row, task) labels are flattened into three 1-D float32 "cat"
  states (score, label, group = task * D + domain); 1-D and float32 so torchmetrics' padded
  all-gather works even for a rank that saw no batch (it substitutes an empty float32 tensor).
  ``compute()`` loops over tasks and the handful of domains.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from gemkd.transfer.metrics.auc import binary_auc
from gemkd.transfer.metrics.calibration import _calibration_from_sums
from gemkd.transfer.metrics.ne import _check_base_rate, _log_loss, _ne_from_sums

_F64 = torch.float64
ALL = "all"
METRICS = ("ne", "auc", "calibration", "n", "positives")
_SUMS = ("count", "positives", "log_loss", "prob_sum")


def _check_names(kind: str, names: list[str]) -> list[str]:
    names = [str(n) for n in names]
    if len(set(names)) != len(names):
        raise ValueError(f"{kind} names must be unique, got {names}")
    for name in names:
        if not name or "/" in name:
            raise ValueError(f"{kind} name {name!r} must be non-empty and contain no '/'")
    return names


class RankingMetrics(Metric):
    """Per-task, per-domain (plus domain "all") NE, AUC and calibration.

    ``base_rates[task]`` is the task's training-data positive rate, p̄ of the all-domains NE;
    ``domain_base_rates[task][domain]`` that domain's own training rate, p̄ of the domain's NE
    (a domain's NE against another rate measures how far that rate is from the domain's, not the
    model: a domain at 9 % clicks among domains at 40 % would read 0.4 for predicting its own
    rate). A domain cell without its own rate takes ``base_rates[task]``; a task without either
    falls back to each cell's own label mean.
    Undefined values are nan, never an exception: NE with no samples or p̄ in {0, 1}, AUC with
    a single class, calibration with no positives. ``compute()`` also returns ``n`` (labelled
    rows) and ``positives`` under the same key scheme, for ``to_frame`` and for judging how much
    to trust a cell. ``compute_auc=False`` stores no scores and omits the ``auc`` keys.
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False
    # the states add_state registers: [T, D] sums; the AUC's scores, labels and groups (lists
    # while updating)
    count: torch.Tensor
    positives: torch.Tensor
    log_loss: torch.Tensor
    prob_sum: torch.Tensor
    auc_score: list[torch.Tensor]
    auc_label: list[torch.Tensor]
    auc_group: list[torch.Tensor]

    def __init__(
        self,
        tasks: list[str],
        n_domains: int,
        domain_names: list[str] | None = None,
        base_rates: dict[str, float] | None = None,
        compute_auc: bool = True,
        domain_base_rates: dict[str, dict[str, float]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not tasks:
            raise ValueError("tasks must name at least one task")
        self.tasks = _check_names("task", list(tasks))
        if int(n_domains) < 1:
            raise ValueError(f"n_domains must be >= 1, got {n_domains}")
        self.n_domains = int(n_domains)
        if domain_names is None:
            domain_names = [str(d) for d in range(self.n_domains)]
        if len(domain_names) != self.n_domains:
            raise ValueError(
                f"domain_names has {len(domain_names)} names but n_domains is {self.n_domains}"
            )
        self.domain_names = _check_names("domain", list(domain_names))
        if ALL in self.domain_names and self.domain_names != [ALL]:
            # a single-domain log's one domain *is* the all-domains row (the importer names it
            # "all"); beside other domains the name would be ambiguous
            raise ValueError(f"domain name {ALL!r} is reserved for the all-domains row (it may "
                             f"only name a dataset's single domain), got {self.domain_names}")
        base_rates = dict(base_rates or {})
        unknown = sorted(set(base_rates) - set(self.tasks))
        if unknown:
            raise ValueError(f"base_rates names unknown tasks {unknown}; tasks are {self.tasks}")
        # nan = "no training base rate": fall back to the evaluation labels.
        self.base_rates: list[float] = [
            math.nan
            if base_rates.get(t) is None
            else _check_base_rate(base_rates[t], f"base_rates[{t!r}]")
            for t in self.tasks
        ]
        self.domain_base_rates = self._domain_rates(domain_base_rates or {})
        self.compute_auc = compute_auc

        shape = (len(self.tasks), self.n_domains)
        for name in _SUMS:
            self.add_state(name, default=torch.zeros(shape, dtype=_F64), dist_reduce_fx="sum")
        if compute_auc:
            for name in ("auc_score", "auc_label", "auc_group"):
                self.add_state(name, default=[], dist_reduce_fx="cat")

    def _domain_rates(self, rates: dict[str, dict[str, float]]) -> list[list[float]]:
        """``[T][D]`` p̄ of each domain cell: its own rate, else the task's (nan: neither)."""
        unknown = sorted(set(rates) - set(self.tasks))
        if unknown:
            raise ValueError(f"domain_base_rates names unknown tasks {unknown}; tasks are "
                             f"{self.tasks}")
        table = []
        for t, task in enumerate(self.tasks):
            own = dict(rates.get(task) or {})
            extra = sorted(set(own) - set(self.domain_names))
            if extra:
                raise ValueError(f"domain_base_rates[{task!r}] names unknown domains {extra}; "
                                 f"domains are {self.domain_names}")
            table.append([self.base_rates[t] if own.get(d) is None else
                          _check_base_rate(own[d], f"domain_base_rates[{task!r}][{d!r}]")
                          for d in self.domain_names])
        return table

    def update(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        domain: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> None:
        """Add a batch: ``logits [B, T]``, ``labels [B, T]`` 0/1, ``domain [B]`` int in
        ``[0, n_domains)``, optional ``mask [B, T]`` bool (True = label present; masked entries
        may hold anything, nan included). Costs one host sync, to validate labels and domains.
        """
        n_tasks = len(self.tasks)
        logits, labels, domain = logits.detach(), labels.detach(), domain.detach()
        if logits.ndim != 2 or logits.shape[1] != n_tasks:
            raise ValueError(f"logits must be [B, {n_tasks}], got {tuple(logits.shape)}")
        if not logits.is_floating_point():
            raise ValueError(f"logits must be a floating tensor, got {logits.dtype}")
        if labels.shape != logits.shape:
            raise ValueError(f"labels {tuple(labels.shape)} != logits {tuple(logits.shape)}")
        if domain.shape != logits.shape[:1] or domain.is_floating_point():
            raise ValueError(
                f"domain must be an integer [B={logits.shape[0]}] tensor, "
                f"got {domain.dtype} {tuple(domain.shape)}"
            )
        if mask is not None and (mask.shape != logits.shape or mask.dtype != torch.bool):
            raise ValueError(
                f"mask must be bool {tuple(logits.shape)}, got {mask.dtype} {tuple(mask.shape)}"
            )
        present = torch.ones_like(logits, dtype=torch.bool) if mask is None else mask
        self._validate(labels, domain, present)

        # Neutralise absent entries before any arithmetic: nan * 0 would still be nan.
        x = torch.where(present, logits.to(_F64), 0.0)
        y = torch.where(present, labels.to(_F64), 0.0)
        w = present.to(_F64)
        log_loss = _log_loss(x, y, from_logits=True, eps=0.0)
        per_row = torch.stack([w, y, log_loss * w, torch.sigmoid(x) * w], dim=1)  # [B, 4, T]
        sums = torch.zeros((self.n_domains, 4, n_tasks), dtype=_F64, device=per_row.device)
        sums.index_add_(0, domain.long(), per_row)  # [D, 4, T]: one scatter for all sums
        for i, name in enumerate(_SUMS):
            state = getattr(self, name)
            state += sums[:, i, :].T

        if self.compute_auc:
            task_offset = torch.arange(n_tasks, device=domain.device) * self.n_domains
            group = task_offset[None, :] + domain.long()[:, None]  # [B, T]
            if mask is None:
                score, label, group = logits.flatten(), labels.flatten(), group.flatten()
            else:  # boolean indexing: another host sync, only when a mask is given
                score, label, group = logits[mask], labels[mask], group[mask]
            self.auc_score.append(score.float())
            self.auc_label.append(label.float())
            self.auc_group.append(group.float())

    def _validate(self, labels: torch.Tensor, domain: torch.Tensor, present: torch.Tensor) -> None:
        bad_labels = (present & (labels != 0) & (labels != 1)).sum().to(_F64)
        checks = [bad_labels]
        if domain.numel():
            checks += [domain.min().to(_F64), domain.max().to(_F64)]
        values = torch.stack(checks).tolist()
        if values[0]:
            raise ValueError(f"labels must be 0 or 1 where present; {int(values[0])} are not")
        if len(values) == 3 and (values[1] < 0 or values[2] >= self.n_domains):
            raise ValueError(
                f"domain ids must lie in [0, {self.n_domains}), got min {int(values[1])} "
                f"max {int(values[2])}"
            )

    def _auc_table(self) -> torch.Tensor:
        """AUC ``[T, D + 1]`` (last column: all domains) from the gathered score states."""
        n_tasks, n_dom = len(self.tasks), self.n_domains
        table = torch.full((n_tasks, n_dom + 1), math.nan, dtype=_F64)
        if isinstance(self.auc_score, list) and not self.auc_score:
            return table
        score = dim_zero_cat(self.auc_score)
        label = dim_zero_cat(self.auc_label)
        group = dim_zero_cat(self.auc_group).long()
        for t in range(n_tasks):
            in_task = (group >= t * n_dom) & (group < (t + 1) * n_dom)
            s, y, dom = score[in_task], label[in_task], group[in_task] - t * n_dom
            table[t, n_dom] = binary_auc(s, y).item()
            for d in range(n_dom):
                in_dom = dom == d
                table[t, d] = binary_auc(s[in_dom], y[in_dom]).item()
        return table

    def compute(self) -> dict[str, float]:
        """Flat ``{metric}/{task}/{domain}`` floats for metric in ne, auc, calibration, n,
        positives and domain in ``domain_names + ["all"]``."""

        def with_all(x: torch.Tensor) -> torch.Tensor:  # [T, D] -> [T, D + 1]
            return torch.cat([x, x.sum(dim=1, keepdim=True)], dim=1)

        count, positives = with_all(self.count), with_all(self.positives)
        log_loss, prob_sum = with_all(self.log_loss), with_all(self.prob_sum)
        base = torch.tensor([[*row, rate] for row, rate in
                             zip(self.domain_base_rates, self.base_rates, strict=True)],
                            dtype=_F64, device=count.device)  # [T, D + 1]
        table = {
            "ne": _ne_from_sums(log_loss, count, positives, base),
            "calibration": _calibration_from_sums(prob_sum, positives),
            "n": count,
            "positives": positives,
        }
        if self.compute_auc:
            table["auc"] = self._auc_table().to(count.device)
        names = [*self.domain_names, ALL]
        out: dict[str, float] = {}
        for metric in METRICS:
            if metric not in table:
                continue
            rows = table[metric].cpu().tolist()
            for t, task in enumerate(self.tasks):
                for d, dom in enumerate(names):
                    out[f"{metric}/{task}/{dom}"] = float(rows[t][d])
        return out


def to_frame(result: dict[str, float]) -> pd.DataFrame:
    """One row per (task, domain) from ``RankingMetrics.compute()``, for reports and CSVs.

    Columns: task, domain, ne, auc, calibration, n, positives (missing metrics are NaN, e.g. auc
    with ``compute_auc=False``). Rows keep the order in which the keys first appear.
    """
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in result.items():
        parts = key.split("/")
        if len(parts) != 3 or parts[0] not in METRICS:
            raise ValueError(
                f"to_frame: key {key!r} is not '{{metric}}/{{task}}/{{domain}}' "
                f"with metric in {METRICS}"
            )
        metric, task, dom = parts
        rows.setdefault((task, dom), {"task": task, "domain": dom})[metric] = float(value)
    columns = ["task", "domain", "ne", "auc", "calibration", "n", "positives"]
    frame = pd.DataFrame(list(rows.values()), columns=columns)
    frame = frame.astype({m: "float64" for m in METRICS})
    for count in ("n", "positives"):
        if frame[count].notna().all():
            frame[count] = frame[count].astype("int64")
    return frame

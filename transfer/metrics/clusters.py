"""Per-user sums of an evaluation's log loss: what a user-level (cluster) bootstrap resamples.

A user's impressions are correlated, so an interval that treats them as independent is too
narrow (DESIGN §6). Keeping, per (user, domain) cluster, the sum of the binary log loss, the
count of present labels and the positives per task is enough to recompute NE for any
resample of users — and it is a few kilobytes per run where per-example predictions would be
megabytes. Every model evaluated on the same rows gets the same clusters in the same order
(sorted by user, then domain), so the files of one evaluation pair row by row.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from gemkd.transfer.io.atomic import atomic_write_bytes
from gemkd.transfer.metrics.numerics import log_loss_from_logits

_F64 = torch.float64


class ClusterLoss:
    """Accumulates ``loss``, ``n`` and ``pos`` ``[C, T]`` per (user, domain) over batches."""

    def __init__(self, n_tasks: int) -> None:
        self.n_tasks = n_tasks
        self._parts: list[tuple[np.ndarray, ...]] = []

    def update(self, logits: torch.Tensor, labels: torch.Tensor, user_id: torch.Tensor,
               domain: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """``logits``/``labels`` ``[B, T]``, ``user_id``/``domain`` ``[B]``, ``mask [B, T]``
        (True = label present). The loss is metrics.numerics' (as the NE metric's), in float64."""
        x, y = logits.detach().to(_F64), labels.detach().to(_F64)
        present = torch.isfinite(y) if mask is None else mask.detach() & torch.isfinite(y)
        y = torch.where(present, y, torch.zeros_like(y))
        loss = log_loss_from_logits(y, x)
        w = present.to(_F64)
        self._parts.append((user_id.detach().cpu().numpy().astype(np.int64),
                            domain.detach().cpu().numpy().astype(np.int64),
                            (loss * w).cpu().numpy(), w.cpu().numpy(), (y * w).cpu().numpy()))

    def arrays(self) -> dict[str, np.ndarray]:
        """``user_id``, ``domain`` ``[C]`` (sorted by user, then domain) and ``loss``, ``n``,
        ``pos`` ``[C, T]``."""
        if not self._parts:
            empty = np.zeros((0, self.n_tasks))
            return {"user_id": np.zeros(0, np.int64), "domain": np.zeros(0, np.int64),
                    "loss": empty, "n": empty.copy(), "pos": empty.copy()}
        user, dom, loss, n, pos = (np.concatenate(p) for p in zip(*self._parts, strict=True))
        keys = np.stack([user, dom], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)

        def total(values: np.ndarray) -> np.ndarray:
            return np.stack([np.bincount(inverse, weights=values[:, t], minlength=len(uniq))
                             for t in range(values.shape[1])], axis=1)

        return {"user_id": uniq[:, 0], "domain": uniq[:, 1], "loss": total(loss), "n": total(n),
                "pos": total(pos)}

    def save(self, path: str | Path, tasks: list[str], domains: list[str],
             base_rates: dict[str, float] | None) -> None:
        """Write the sums with the names that make the file self-describing (atomic)."""
        rates = base_rates or {}
        arrays = {**self.arrays(), "tasks": np.asarray(tasks), "domains": np.asarray(domains),
                  "base_rate": np.asarray([rates.get(t, np.nan) if rates.get(t) is not None
                                           else np.nan for t in tasks], dtype=np.float64)}
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub: ** may be allow_pickle
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.getvalue())


def load_clusters(path: str | Path) -> dict[str, np.ndarray]:
    """A file written by :meth:`ClusterLoss.save`, as plain arrays."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}

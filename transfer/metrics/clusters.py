"""Per-user sums of an evaluation's log loss: what a user-level (cluster) bootstrap resamples.

A user's impressions are correlated, so an interval that treats them as independent is too
narrow (DESIGN §6). Keeping, per (user, domain) cluster, the sum of the binary log loss, the
count of present labels and the positives per task is enough to recompute NE for any
resample of users. Every model evaluated on the same rows gets the same clusters in the same
order (sorted by user, then domain), so the files of one evaluation pair row by row.

A thin log has about as many clusters as rows (a median user with one rating), and a run writes
a file per student run: 72 files of 9,324 clusters took 43 MB for a 1.8 MB dataset in float64
``np.savez``. So a file is a compressed ``.npz`` (the same arrays and names, read by the same
``np.load``) with the loss sums in float32 and the counts as integers where they are whole: a
float32 rounding moves each cluster's sum by at most 2^-24 (6e-8) of itself, so an NE by at most
that share of itself and a difference of two (a ΔNE, an interval end) by at most that share of
their sum: ~1e-7 where a report prints 4 decimals (:data:`LOSS_DTYPE`; tests/transfer/metrics).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from gemkd.transfer.io.atomic import atomic_write_bytes
from gemkd.transfer.metrics.numerics import log_loss_from_logits

_F64 = torch.float64
#: The stored loss sums' dtype: a relative rounding of at most 2^-24 per cluster (module doc).
LOSS_DTYPE = np.float32


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
        np.savez_compressed(buf, **compact(arrays))  # type: ignore[arg-type]  # stub: ** may be
        # allow_pickle
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.getvalue())


def compact(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays as stored: ``loss`` in :data:`LOSS_DTYPE`; ``n`` and ``pos`` (counts of
    present labels and positives) as int32 when every value is whole, else unchanged (soft
    labels); ``domain`` as int16 when it fits. Readers cast back to float64/int64."""
    out = dict(arrays)
    out["loss"] = np.asarray(arrays["loss"]).astype(LOSS_DTYPE)
    for key in ("n", "pos"):
        v = np.asarray(arrays[key])
        if v.size == 0 or (np.all(np.isfinite(v)) and np.all(v == np.round(v))
                           and 0 <= v.min() and v.max() < 2**31):
            out[key] = v.astype(np.int32)
    d = np.asarray(arrays["domain"])
    if d.size == 0 or (d.min() >= 0 and d.max() < 2**15):
        out["domain"] = d.astype(np.int16)
    return out


def load_clusters(path: str | Path) -> dict[str, np.ndarray]:
    """A file written by :meth:`ClusterLoss.save`, as plain arrays."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}

"""The batch every model in gemkd consumes (DESIGN §2.2).

Sequences stay jagged (shared ``seq_offsets`` plus one values tensor per event field): they are
never padded on the host. Models pad on the device, per batch, to ``seq_max_len``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch


@dataclass
class Batch:
    """A time-ordered slice of impressions.

    Shapes: ``dense [B, n_dense] float32``, ``categorical [B, n_cat] int64``,
    ``seq_values[name] [N] int64`` with ``seq_offsets [B+1] int64`` shared by all event fields,
    ``labels [B, n_tasks] float32``, ``domain/example_id/user_id/day/ts [B] int64``.
    ``oracle [B, n_tasks] float32`` holds the true probabilities where the data has them
    (synthetic worlds), else ``None``. ``seq_max_len`` is the longest sequence in this batch
    (a Python int, so device code never has to synchronise to learn it).
    """

    dense: torch.Tensor
    categorical: torch.Tensor
    seq_values: dict[str, torch.Tensor]
    seq_offsets: torch.Tensor
    seq_max_len: int
    labels: torch.Tensor
    domain: torch.Tensor
    example_id: torch.Tensor
    user_id: torch.Tensor
    day: torch.Tensor
    ts: torch.Tensor
    oracle: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.example_id.shape[0])

    @property
    def seq_lengths(self) -> torch.Tensor:
        return self.seq_offsets[1:] - self.seq_offsets[:-1]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Move every tensor (Lightning calls this through ``transfer_batch_to_device``)."""

        def move(x):
            if isinstance(x, torch.Tensor):
                return x.to(device, non_blocking=non_blocking)
            if isinstance(x, dict):
                return {k: move(v) for k, v in x.items()}
            return x

        return replace(self, **{f.name: move(getattr(self, f.name)) for f in fields(self)})

    def pin_memory(self) -> Batch:
        def pin(x):
            if isinstance(x, torch.Tensor):
                return x.pin_memory()
            if isinstance(x, dict):
                return {k: pin(v) for k, v in x.items()}
            return x

        return replace(self, **{f.name: pin(getattr(self, f.name)) for f in fields(self)})

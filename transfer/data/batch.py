"""The batch every model in gemkd consumes (DESIGN §2.2).

Sequences stay jagged (shared ``seq_offsets`` plus one values tensor per event field): they are
never padded on the host. Models pad on the device, per batch, to ``seq_max_len``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
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
        """Move every tensor (Lightning calls this through ``transfer_batch_to_device``, every
        step). Like ``Tensor.to``, a batch already on ``device`` is returned as it is: a CPU
        step would otherwise pay a dozen no-op ``to`` calls and a new ``Batch``. A pinned tensor
        (a loader's ``pin_memory``) is copied asynchronously: Lightning passes no
        ``non_blocking`` to a batch type's ``to``. A batch a DataLoader worker handed over as
        one buffer (:mod:`~gemkd.transfer.data.packed`) moves in one copy of that buffer."""
        device = torch.device(device)
        if all(t.device == device for t in self._tensors()):
            return self
        packed = self.__dict__.get("_packed")
        moved = None if packed is None else packed.move(self, device, non_blocking)
        if moved is not None:
            return moved
        return self._map(lambda x: x.to(device, non_blocking=non_blocking or x.is_pinned()))

    def __getstate__(self) -> dict:
        # a worker's buffer (packed.py) is how this batch arrived, not part of it: not pickled
        return {k: v for k, v in self.__dict__.items() if k != "_packed"}

    def copy(self) -> Batch:
        """A new Batch holding the same tensors, with its own ``seq_values`` and ``meta`` dicts:
        what a reader hands out of batches it keeps (a consumer may set fields or meta). The
        fields are copied as they are (``__init__`` checks nothing), ~4x cheaper than
        ``dataclasses.replace``, once per training step."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.seq_values, new.meta = dict(self.seq_values), dict(self.meta)
        return new

    def _tensors(self) -> Iterator[torch.Tensor]:
        cls: type = type(self)  # as type[Batch] mypy checks the unhashable instances' __hash__
        for name in _field_names(cls):
            x = getattr(self, name)
            if isinstance(x, torch.Tensor):
                yield x
            elif isinstance(x, dict):
                yield from (v for v in x.values() if isinstance(v, torch.Tensor))

    def pin_memory(self) -> Batch:
        return self._map(lambda x: x.pin_memory())

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        """A copy with ``fn`` applied to every tensor, including those in dict fields."""

        def apply(x):
            if isinstance(x, torch.Tensor):
                return fn(x)
            if isinstance(x, dict):
                return {k: apply(v) for k, v in x.items()}
            return x

        return replace(self, **{f.name: apply(getattr(self, f.name)) for f in fields(self)})


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names, once per class: ``dataclasses.fields`` builds its tuple anew
    on each call, and ``Batch.to`` walks them every training step."""
    return tuple(f.name for f in fields(cls))

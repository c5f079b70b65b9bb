"""One buffer per batch between DataLoader worker processes and the training process.

A worker hands each batch to the training process through shared memory. A ``Batch`` holds a
dozen tensors (features, labels, keys, one per history field), and torch moves each through
shared memory on its own: a segment created and filled, a file descriptor sent over a socket
and mapped again on the other side, a dozen times a batch. :func:`pack` copies the batch's
tensors into one shared buffer instead (one copy, as torch's own per-tensor move makes), so a
batch crosses as one descriptor; :meth:`PackedBatch.unpack` gives the same ``Batch`` back as
views of that buffer (no copy). Pinned memory, when the loader pins, is one page-locked copy
of the buffer too. The batch's values, dtypes and shapes are unchanged: a packed loader yields
the batches an unpacked one yields.

Hand-written because neither torch nor Lightning packs a user type's tensors: torch's
``default_collate`` shares one buffer per *stacked* tensor, not one per batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils.data import get_worker_info

from gemkd.transfer.data.batch import Batch

#: every tensor starts at a multiple of this many bytes (a view as int64/float64 needs 8)
ALIGN = 64

# (field, key within a dict field or None, dtype, shape, byte offset)
_Slot = tuple[str, str | None, torch.dtype, tuple[int, ...], int]


class PackedBatch:
    """A ``Batch`` whose tensors (those of ``seq_values`` too) live in one ``uint8`` buffer;
    its other fields (ints, ``None``, ``meta``) as they are."""

    __slots__ = ("buffer", "slots", "rest")

    def __init__(self, buffer: torch.Tensor, slots: tuple[_Slot, ...], rest: dict) -> None:
        self.buffer, self.slots, self.rest = buffer, slots, rest

    def __reduce__(self):  # __slots__ classes pickle through their arguments
        return PackedBatch, (self.buffer, self.slots, self.rest)

    def pin_memory(self) -> PackedBatch:
        """A copy in page-locked memory (what DataLoader's ``pin_memory`` thread calls): one
        copy of the buffer, not one per tensor."""
        return PackedBatch(self.buffer.pin_memory(), self.slots, self.rest)

    def unpack(self) -> Batch:
        """The batch, its tensors views of the buffer. The batch remembers the buffer, so that
        its move to a device is one copy (:meth:`move`, called by ``Batch.to``)."""
        fields: dict[str, Any] = {**self.rest, "seq_values": {}}
        for name, key, dtype, shape, offset in self.slots:
            size = dtype.itemsize * _numel(shape)
            view = self.buffer[offset:offset + size].view(dtype).view(shape)
            if key is None:
                fields[name] = view
            else:
                fields.setdefault(name, {})[key] = view
        batch = Batch(**fields)
        batch._packed = self  # type: ignore[attr-defined]  # (read by Batch.to)
        return batch

    def move(self, batch: Batch, device: torch.device, non_blocking: bool = False
             ) -> Batch | None:
        """``batch`` (unpacked from this) on ``device`` in one copy of the buffer, its tensors
        views there; None when the batch no longer is this buffer's views (a consumer replaced
        or added a tensor), for the caller to move it tensor by tensor."""
        base = self.buffer.data_ptr()
        if sum(1 for _ in batch._tensors()) != len(self.slots):
            return None
        for name, key, dtype, shape, offset in self.slots:
            t = getattr(batch, name) if key is None else batch.seq_values.get(key)
            if (t is None or t.dtype != dtype or tuple(t.shape) != shape
                    or not t.is_contiguous() or (t.numel() and t.data_ptr() != base + offset)):
                return None
        buffer = self.buffer.to(device, non_blocking=non_blocking or self.buffer.is_pinned())
        rest = {name: getattr(batch, name) for name in self.rest}  # (as the batch has them now)
        return PackedBatch(buffer, self.slots, rest).unpack()


def pack(batch: Batch) -> PackedBatch:
    """``batch``'s tensors copied into one buffer, created in shared memory when this runs in a
    DataLoader worker (so that sending it to the main process copies nothing more)."""
    tensors: list[tuple[str, str | None, torch.Tensor]] = []
    rest: dict[str, Any] = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor):
            tensors.append((f.name, None, value))
        elif f.name == "seq_values":
            tensors.extend((f.name, k, v) for k, v in value.items())
        else:
            rest[f.name] = value
    slots, offset = [], 0
    for name, key, t in tensors:
        slots.append((name, key, t.dtype, tuple(t.shape), offset))
        offset += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    buffer = _new_buffer(offset)
    for (*_, t), (*_, dtype, shape, start) in zip(tensors, slots, strict=True):
        buffer[start:start + dtype.itemsize * t.numel()].view(dtype).view(shape).copy_(t)
    return PackedBatch(buffer, tuple(slots), rest)


def pack_in_worker(item: Any) -> Any:
    """A DataLoader ``collate_fn`` (run in the worker on each item of an unbatched loader):
    a ``Batch`` becomes a :class:`PackedBatch`, anything else passes as it is."""
    return pack(item) if isinstance(item, Batch) else item


def unpack(item: Any) -> Any:
    """The inverse of :func:`pack_in_worker`, in the training process."""
    return item.unpack() if isinstance(item, PackedBatch) else item


def _new_buffer(nbytes: int) -> torch.Tensor:
    if get_worker_info() is None:
        return torch.empty(nbytes, dtype=torch.uint8)
    # created shared, as torch's default_collate does in a worker: sending it copies nothing
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n

"""Read batches ahead in a background thread, so loading overlaps the training step.

A single-process loader reads the next batch only when the step asks for it: the Parquet read,
the checks and the slicing then add to every step (a quarter of a small student's CPU step).
A DataLoader worker *process* would overlap them but pays a pickle and a shared-memory copy per
tensor per batch, more than the read itself for small batches. A thread shares memory, and most
of a read holds no GIL (pyarrow decodes in C++, numpy's vectorised checks release it), so it
runs while the step computes; one producer and a FIFO queue keep the order exactly the source's.

No library fits: torch's DataLoader has only process workers, Lightning none of its own, and
``torchdata`` (whose nodes have a thread prefetcher) is not a dependency.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

_END = object()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class ThreadPrefetcher:
    """Iterate ``source`` through a background thread holding up to ``depth`` items ahead.

    Each ``iter()`` starts one producer over ``iter(source)``; items arrive in the source's
    order, and an exception the source raises is raised in the consumer at the same position.
    A consumer that stops early (``close()``, or the iterator is dropped) stops the producer
    after its current item."""

    def __init__(self, source: Iterable, depth: int = 2) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be >= 1, got {depth}")
        self.source, self.depth = source, depth

    def __iter__(self) -> Iterator:
        return _PrefetchIterator(iter(self.source), self.depth)


def _put(q: queue.Queue, stop: threading.Event, item: Any) -> bool:
    """Put ``item`` unless the consumer has gone; False once it has."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _produce(source: Iterator, q: queue.Queue, stop: threading.Event) -> None:
    """The producer thread. It holds the queue and the stop flag, never the consumer's iterator,
    so a consumer that is dropped unfinished is collected, and its ``__del__`` stops this."""
    try:
        for item in source:
            if not _put(q, stop, item):
                break
        else:
            _put(q, stop, _END)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
        _put(q, stop, _Raised(e))
    finally:
        close = getattr(source, "close", None)
        if stop.is_set() and close is not None:
            close()


class _PrefetchIterator:
    def __init__(self, source: Iterator, depth: int) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        threading.Thread(target=_produce, args=(source, self._queue, self._stop),
                         name="gemkd-prefetch", daemon=True).start()

    def __iter__(self) -> Iterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Raised):
            self._done = True
            raise item.error
        return item

    def close(self) -> None:
        """Stop the producer (after its current item) and drop what it read ahead."""
        self._done = True
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    def __del__(self) -> None:
        self._stop.set()

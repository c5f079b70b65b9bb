"""A dataset's batches joined to a teacher store and LoopFM codes, for a training loop of your
own (DESIGN §5; docs/guides/own_loop.md).

``gemkd run`` wires the store join, the codes and the losses into its own module
(:class:`~gemkd.transfer.distill.DistillModule`); a user with a Lightning module of their own
needs the same inputs without that module. :class:`DistillDataModule` reads the student's days
in time order (one streaming pass, as a run's students read them), joins each batch to the
store a row group at a time (:class:`~gemkd.transfer.store.stream_join.StreamJoin`: memory
bounded by a few row groups, not the store) and, given a code store, adds each row's user's
as-of codes, mean-pooled. Every batch arrives as a :class:`TeacherBatch`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.distill.teacher_targets import StoreTeacher
from gemkd.transfer.methods.base import TeacherTargets
from gemkd.transfer.repr_features import AsOfCodes, CodeStore
from gemkd.transfer.store import TeacherStore
from gemkd.transfer.store.stream_join import StreamJoin


@dataclass
class TeacherBatch:
    """One batch and what distils into it: ``batch`` (the student's inputs and labels),
    ``teacher`` (``logits [B, T]`` in the batch's task order, ``found [B]``: rows the store
    has, ``emb``), ``codes [B, code_dim]`` (the user's as-of LoopFM codes, mean-pooled; None
    without a code store) and ``staleness [B]`` (the row's day minus the teacher's last
    training day: the Student Adapter's input)."""

    batch: Batch
    teacher: TeacherTargets
    staleness: Tensor
    codes: Tensor | None = None

    def to(self, device: torch.device | str) -> TeacherBatch:
        """Every tensor on ``device`` (Lightning moves a batch through its ``to``)."""
        t = self.teacher
        return TeacherBatch(self.batch.to(device),
                            TeacherTargets(t.logits.to(device), t.found.to(device),
                                           None if t.emb is None else t.emb.to(device)),
                            self.staleness.to(device),
                            None if self.codes is None else self.codes.to(device))

    def __len__(self) -> int:
        return len(self.batch)


class _Joined(IterableDataset):
    """A reader's batches, each joined (one pass per iteration, in the reader's order)."""

    def __init__(self, reader: DatasetReader, teacher: StoreTeacher, codes: AsOfCodes | None,
                 trained_until_day: int) -> None:
        super().__init__()
        self.reader, self.teacher, self.codes = reader, teacher, codes
        self.trained_until_day = trained_until_day

    def __iter__(self) -> Iterator[TeacherBatch]:
        for batch in self.reader:
            codes = None if self.codes is None else self.codes.lookup_mean(batch.user_id,
                                                                           batch.ts)
            yield TeacherBatch(batch, self.teacher(batch),
                               (batch.day - self.trained_until_day).float(), codes)


class DistillDataModule(pl.LightningDataModule):
    """The student's days joined to a teacher store (and codes), as Lightning loaders.

    ``data``: a gemkd dataset; ``store``: a teacher store (``gemkd teacher export`` or ``gemkd
    store import``); ``tasks``: the student's tasks (each must be the store's); ``train_days``,
    ``val_days``: half-open day ranges (None: no such loader); ``domains``: the rows kept
    (names; None: all); ``codes``: a code store directory (None: no codes); ``max_events``: the
    as-of codes per row; ``with_emb``: also join the stored representation. Training batches
    come in time order, unshuffled (a streaming pass); rows without a teacher row have
    ``found`` False (policy ``mask``). ``reader_args`` go to every
    :class:`~gemkd.transfer.data.dataset_reader.DatasetReader` (e.g. ``max_seq_len``)."""

    def __init__(self, data: str | Path, store: str | Path, tasks: list[str],
                 train_days: tuple[int, int], val_days: tuple[int, int] | None = None,
                 batch_size: int = 256, domains: list[str] | None = None,
                 codes: str | Path | None = None, max_events: int = 50, with_emb: bool = False,
                 **reader_args: Any) -> None:
        super().__init__()
        self.data, self.tasks = data, list(tasks)
        self.train_days = (int(train_days[0]), int(train_days[1]))
        self.val_days = None if val_days is None else (int(val_days[0]), int(val_days[1]))
        self.batch_size, self.domains, self.with_emb = batch_size, domains, with_emb
        self.reader_args = {"oracle": False, **reader_args}
        self.store = TeacherStore(store)
        self.trained_until_day = int(self.store.manifest.trained_until_day)
        self.code_store = None if codes is None else CodeStore(codes)
        self.max_events = max_events
        schema = DatasetReader(data, days=self.train_days, batch_size=1).schema
        self.domain_ids = None if domains is None else [schema.domains.index(d)
                                                        for d in domains]

    def loader(self, days: tuple[int, int]) -> DataLoader:
        """A loader of ``days``' joined batches, in time order."""
        reader = DatasetReader(self.data, days=days, batch_size=self.batch_size, shuffle=False,
                               tasks=self.tasks, domains=self.domains, **self.reader_args)
        join = StreamJoin(self.store, days=days, domains=self.domain_ids, policy="mask",
                          with_emb=self.with_emb)
        teacher = StoreTeacher(self.store, self.tasks, days=days, policy="mask",
                               with_emb=self.with_emb, join=join)
        codes = None if self.code_store is None else AsOfCodes(
            self.code_store, max_events=self.max_events, days=days)
        return DataLoader(_Joined(reader, teacher, codes, self.trained_until_day),
                          batch_size=None)

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_days)

    def val_dataloader(self) -> DataLoader | list:
        return [] if self.val_days is None else self.loader(self.val_days)

    @property
    def code_dim(self) -> int:
        """The codes' width (0 without a code store)."""
        return 0 if self.code_store is None else self.code_store.code_dim

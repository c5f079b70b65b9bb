"""Lightning DataModule over a gemkd dataset: train / val / test / predict day ranges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, default_convert

from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.packed import pack_in_worker, unpack
from gemkd.transfer.data.prefetch import ThreadPrefetcher
from gemkd.transfer.io import fs


class EpochLoader(DataLoader):
    """A DataLoader that advances its dataset's epoch each pass, so shuffling differs per epoch.

    Lightning only calls ``set_epoch`` on samplers; an IterableDataset has none. ``prefetch``
    > 0 (single-process loading only) reads that many batches ahead in a background thread
    (:class:`~gemkd.transfer.data.prefetch.ThreadPrefetcher`): same batches, same order. A pass
    the reader serves from memory (``DatasetReader.in_memory``) is the reader's own iterator.
    With worker processes, each batch crosses to this process as one shared buffer
    (:mod:`~gemkd.transfer.data.packed`; ``pack=False``: tensor by tensor, as torch does) and is
    pinned as one buffer when ``pin_memory`` is set: the same batches either way.
    """

    dataset: DatasetReader  # the only dataset it is built over (AdsDataModule._loader)

    def __init__(self, *args: Any, prefetch: int = 0, pack: bool = True, **kwargs: Any) -> None:
        if pack and kwargs.get("num_workers", 0) > 0 and kwargs.get("collate_fn") is None:
            kwargs["collate_fn"] = pack_in_worker  # runs in the worker, on each batch
        super().__init__(*args, **kwargs)
        self.prefetch = prefetch

    def __iter__(self):
        # A pass served whole from the process cache (a sweep's later students) has nothing for
        # a thread to overlap, and in one process, without collation or pinning, DataLoader's
        # iterator only hands the reader's batches through: that pass is the reader's own
        # iterator (the thread's hand-off and DataLoader's per-batch record_function, fetch and
        # convert cost ~25 us a batch, more on a busy machine where the thread takes the GIL).
        resident = (self.num_workers == 0 and not self._auto_collation and not self.pin_memory
                    and self.collate_fn is default_convert
                    and getattr(self.dataset, "in_memory", lambda: False)())
        it = iter(self.dataset) if resident else super().__iter__()
        self.dataset.set_epoch(self.dataset.epoch + 1)
        if self.collate_fn is pack_in_worker:
            return map(unpack, it)
        if self.prefetch and self.num_workers == 0 and not resident:
            # the producer starts after set_epoch: the reader reads its epoch when first asked
            return iter(ThreadPrefetcher(it, self.prefetch))
        return it


class AdsDataModule(pl.LightningDataModule):
    """Day ranges are half-open ``[first, end)``; ``reader_args`` go to every DatasetReader.
    ``prefetch``: batches the training loader reads ahead in a background thread when
    ``num_workers`` is 0 (0: none, read on demand). ``num_workers`` > 0: that many DataLoader
    worker processes read row groups side by side, each ``prefetch_factor`` (4) batches ahead;
    ``pin_memory`` (None: when CUDA is available) pins each batch for an asynchronous copy to
    the GPU."""

    def __init__(self, data_dir: str | Path, train_days: tuple[int, int] | None = None,
                 val_days: tuple[int, int] | None = None,
                 test_days: tuple[int, int] | None = None,
                 predict_days: tuple[int, int] | None = None, batch_size: int = 4096,
                 num_workers: int = 0, shuffle: bool = True, seed: int = 0, prefetch: int = 0,
                 pin_memory: bool | None = None, **reader_args: Any) -> None:
        super().__init__()
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.data_dir = fs.as_where(data_dir)
        self.days = {"train": train_days, "val": val_days, "test": test_days,
                     "predict": predict_days}
        self.batch_size, self.num_workers, self.prefetch = batch_size, num_workers, prefetch
        self.shuffle, self.seed = shuffle, seed
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.reader_args = reader_args

    def reader(self, split: str, shuffle: bool = False) -> DatasetReader:
        return DatasetReader(self.data_dir, days=self.days[split], batch_size=self.batch_size,
                             shuffle=shuffle, seed=self.seed, **self.reader_args)

    def _loader(self, split: str, shuffle: bool = False, prefetch: int = 0) -> DataLoader:
        return EpochLoader(self.reader(split, shuffle), batch_size=None,
                           num_workers=self.num_workers, pin_memory=self.pin_memory,
                           prefetch_factor=4 if self.num_workers else None, prefetch=prefetch)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=self.shuffle, prefetch=self.prefetch)

    def val_dataloader(self) -> DataLoader | list:
        # no val days means no validation, not every day of the dataset
        return self._loader("val") if self.days["val"] is not None else []

    def test_dataloader(self) -> DataLoader | list:
        return self._loader("test") if self.days["test"] is not None else []

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict")

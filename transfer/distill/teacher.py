"""Teacher targets for a student: the store joined to each batch, in the student's task order."""

from __future__ import annotations

import torch
from torch import Tensor

from transfer.data.batch import Batch
from transfer.errors import StoreError
from transfer.store import TeacherJoin, TeacherStore


class StoreTeacher:
    """Callable ``batch -> (logits [B, T], found [B])`` over a ``TeacherStore``.

    ``tasks`` are the student's tasks; each must be one of the store's (a student may learn a
    subset). ``policy`` is the store join's: ``"error"`` or ``"mask"`` (no KD on missing rows).
    """

    def __init__(self, store: TeacherStore, tasks: list[str],
                 days: tuple[int, int] | None = None, policy: str = "mask") -> None:
        missing = [t for t in tasks if t not in store.tasks]
        if missing:
            raise StoreError(f"{store.path}: store has tasks {store.tasks}, student expects "
                             f"{tasks} ({missing[0]!r} missing)")
        self.join = TeacherJoin(store, days=days, policy=policy)
        self.columns = [store.tasks.index(t) for t in tasks]

    @property
    def coverage(self) -> float:
        return self.join.coverage

    def __call__(self, batch: Batch) -> tuple[Tensor, Tensor]:
        res = self.join(batch.example_id)
        logits = torch.from_numpy(res.logits[:, self.columns])
        return logits, torch.from_numpy(res.found)

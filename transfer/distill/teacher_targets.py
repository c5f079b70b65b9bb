"""Teacher targets for a student: a store joined to each batch, in the student's task order."""

from __future__ import annotations

import torch

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.errors import StoreError
from gemkd.transfer.methods.base import TeacherTargets
from gemkd.transfer.options import JoinPolicy
from gemkd.transfer.store import TeacherJoin, TeacherStore
from gemkd.transfer.store.stream_join import StreamJoin


class StoreTeacher:
    """Callable ``batch -> TeacherTargets`` over a ``TeacherStore`` (host tensors).

    ``tasks`` are the student's tasks; each must be one of the store's (a student may learn a
    subset). ``policy`` is the store join's: ``"error"`` or ``"mask"`` (no KD on missing rows).
    ``with_emb`` also returns the stored representation (a method that needs ``teacher_emb``).
    ``join``: a join already built with those settings (``fresh()`` of an earlier one: a
    sweep's students share one read of the store), e.g. a :class:`StreamJoin` scoped to the
    student's days and domain (bounded memory).
    """

    def __init__(self, store: TeacherStore, tasks: list[str],
                 days: tuple[int, int] | None = None, policy: JoinPolicy = "mask",
                 with_emb: bool = False, join: TeacherJoin | StreamJoin | None = None) -> None:
        missing = [t for t in tasks if t not in store.tasks]
        if missing:
            raise StoreError(f"{store.path}: store has tasks {store.tasks}, student expects "
                             f"{tasks} ({missing[0]!r} missing)")
        self.store = store
        if join is not None and (join.store is not store or join.days != days
                                 or join.policy != policy or join.with_emb != with_emb):
            raise ValueError("StoreTeacher: the given join was built for another store, days, "
                             "policy or with_emb")
        self.join: TeacherJoin | StreamJoin = (
            join if join is not None
            else TeacherJoin(store, days=days, policy=policy, with_emb=with_emb))
        self.columns = [store.tasks.index(t) for t in tasks]
        #: the student's tasks are the store's, in its order: the joined logits as they are
        self._all_columns = self.columns == list(range(len(store.tasks)))

    @property
    def coverage(self) -> float:
        return self.join.coverage

    @property
    def emb_dim(self) -> int:
        return self.store.emb_dim

    def __call__(self, batch: Batch) -> TeacherTargets:
        res = self.join(batch.example_id)
        emb = None if res.emb is None else torch.from_numpy(res.emb)
        logits = res.logits if self._all_columns else res.logits[:, self.columns]
        return TeacherTargets(torch.from_numpy(logits), torch.from_numpy(res.found), emb)

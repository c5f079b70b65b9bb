"""SOLARIS speculative pair representations as a transfer method (docs/guides/solaris.md): a
student row looks up the teacher's precomputed vector of its (day, user, item); a miss gets the
declared fallback and a miss flag. Unlike LoopFM codes (the user's past examples) the vector is
the teacher's view of this user with this candidate."""

from __future__ import annotations

import weakref

from torch import Tensor

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import MethodContext, TransferMethod
from gemkd.transfer.methods.base import BUILTIN_METHODS
from gemkd.transfer.solaris import FALLBACKS, PairLookup, PairStore, item_feature

#: One lookup per opened pair store and fallback in this process: a pack's members (a tuning
#: round's 12, a lag's seeds) and every later run of the lag share it instead of each reading the
#: store and indexing it again; it goes when the lag's inputs are closed (the store is the key).
_LOOKUPS: weakref.WeakKeyDictionary[PairStore, dict[str, PairLookup]] = (
    weakref.WeakKeyDictionary())


def shared_lookup(store: PairStore, fallback: str) -> PairLookup:
    """``PairLookup.from_store(store, fallback)``, built once per store object and fallback
    (a lookup is read-only: sharing it changes no member's numbers)."""
    own = _LOOKUPS.setdefault(store, {})
    if fallback not in own:
        own[fallback] = PairLookup.from_store(store, fallback)
    return own[fallback]


@BUILTIN_METHODS.register("solaris")
class Solaris(TransferMethod):
    """Feeds ``[B, dim + 1]`` (the pair vector or its ``fallback`` — ``user_mean``,
    ``item_mean`` or ``zero`` — then the miss flag) through the student's zero-initialised
    representation path. ``item_feature`` (default: the schema's item id) must be the feature
    the pair store was keyed by (the run's ``solaris.item_feature``). No parameters of its own."""

    needs = frozenset({"pairs"})

    def __init__(self, fallback: str = "user_mean", item_feature: str | None = None) -> None:
        super().__init__()
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback {fallback!r}: expected one of {', '.join(FALLBACKS)}")
        self.fallback, self.item_feature = fallback, item_feature
        self.lookup: PairLookup | None = None
        self.item_col = -1

    def _store(self, ctx: MethodContext) -> PairStore:
        if not isinstance(ctx.pairs, PairStore):
            raise ConfigError(f"method {self.name} needs the SOLARIS pair store (a run's "
                              "solaris step); this run has none")
        return ctx.pairs

    def feature_dim(self, ctx: MethodContext) -> int:
        return self._store(ctx).dim + 1

    def setup(self, ctx: MethodContext) -> None:
        store = self._store(ctx)
        name = item_feature(ctx.schema, self.item_feature or store.meta.get("item_feature"))
        self.item_col = [f.name for f in ctx.schema.categorical].index(name)
        self.lookup = shared_lookup(store, self.fallback)

    def features(self, batch: Batch) -> Tensor:
        assert self.lookup is not None, "setup() first"
        out = self.lookup.lookup(batch.day, batch.user_id, batch.categorical[:, self.item_col])
        return out.to(batch.categorical.device, non_blocking=True)

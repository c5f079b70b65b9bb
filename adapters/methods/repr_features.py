"""LoopFM representation features as a transfer method (DESIGN §5): the user's stored teacher
codes strictly before each example, pooled, fed to the student as an input."""

from __future__ import annotations

from torch import Tensor

from gemkd.adapters.code_attention import CodeAttentionPool
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.layers import HashedEmbedding
from gemkd.transfer.methods import MethodContext, TransferMethod
from gemkd.transfer.methods.base import BUILTIN_METHODS
from gemkd.transfer.ops import segment_mean
from gemkd.transfer.repr_features import AsOfCodes

POOLINGS = ("mean", "attention")
ITEM_FEATURES = ("ad_id", "item_id", "video_id", "movie_id")


@BUILTIN_METHODS.register("repr")
class Repr(TransferMethod):
    """``pooling`` ``mean`` (the average of the as-of codes; no parameters) or ``attention``
    (target attention: a learned query from the candidate's ``query_feature`` embedding, width
    ``query_dim``, weighs the user's codes; it starts as the mean). The student receives
    ``[B, code_dim]`` through its zero-initialised representation path (``repr_dim``).
    ``query_feature`` defaults to the schema's item id (ad_id, item_id, video_id, movie_id)."""

    needs = frozenset({"codes"})

    def __init__(self, pooling: str = "mean", query_feature: str | None = None,
                 query_dim: int = 8, max_rows: int = 100_000) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: expected one of {', '.join(POOLINGS)}")
        self.pooling, self.query_feature, self.query_dim = pooling, query_feature, query_dim
        self.max_rows = max_rows
        self.asof: AsOfCodes | None = None
        self.query_col = -1
        self.query: HashedEmbedding | None = None
        self.pool: CodeAttentionPool | None = None

    def _codes(self, ctx: MethodContext) -> AsOfCodes:
        if not isinstance(ctx.codes, AsOfCodes):
            raise ConfigError(f"method {self.name} needs the LoopFM codes of the teacher")
        return ctx.codes

    def feature_dim(self, ctx: MethodContext) -> int:
        return self._codes(ctx).code_dim

    def setup(self, ctx: MethodContext) -> None:
        self.asof = self._codes(ctx)
        self.setup_serving(ctx.schema, self.asof.code_dim)

    def setup_serving(self, schema: DatasetSchema, code_dim: int) -> None:
        """Build the pooling's parameters without the codes: a served student's host looks
        its codes up and hands them to :meth:`pool_codes` (a student artifact)."""
        if self.pooling == "mean":
            return
        names = [f.name for f in schema.categorical]
        feature = self.query_feature or next((n for n in ITEM_FEATURES if n in names), None)
        if feature not in names:
            raise ConfigError(f"method {self.name}: query_feature {feature!r} is not a "
                              f"categorical feature of the dataset ({', '.join(names)})")
        self.query_col = names.index(feature)
        card = schema.categorical[self.query_col].cardinality
        self.query = HashedEmbedding(min(card, self.max_rows), self.query_dim)
        self.pool = CodeAttentionPool(code_dim, self.query_dim)

    def features(self, batch: Batch) -> Tensor:
        assert self.asof is not None, "setup() first"
        if self.pool is None:  # the mean, without gathering the codes (AsOfCodes.lookup_mean)
            return self.asof.lookup_mean(batch.user_id, batch.ts)
        values, offsets = self.asof.lookup(batch.user_id, batch.ts)
        device = batch.categorical.device
        return self.pool_codes(batch.categorical, values.to(device, non_blocking=True),
                               offsets.to(device, non_blocking=True))

    def pool_codes(self, categorical: Tensor, values: Tensor, offsets: Tensor) -> Tensor:
        """``[B, code_dim]``: the as-of codes ``values [N, code_dim]`` (segments ``offsets
        [B+1]``) pooled as :meth:`features` pools them, from tensors alone: what an exported
        serving program runs after the host's as-of lookup (the mean to float rounding: the
        training path sums with ``embedding_bag``)."""
        if self.pool is None:
            return segment_mean(values, offsets)
        assert self.query is not None  # setup() builds it with the pool
        return self.pool(self.query(categorical[:, self.query_col]), values, offsets)

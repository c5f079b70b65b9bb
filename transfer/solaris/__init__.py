"""SOLARIS speculative pair representations (DESIGN §5): the teacher's view of a (user, item)
pair, computed ahead of time for the pairs a speculation policy predicts, looked up by a
student row with a declared fallback on a miss.

What needs no model lives here: the policy plug-ins and the past-only log view they read, the
pair store, the lookup with its fallbacks and the hit-rate bookkeeping. The teacher's forward
pass is the run's step (``gemkd.experiments.run.solaris_step``); the student method is
``gemkd.adapters.methods.solaris``.
"""

from gemkd.transfer.solaris.hitrate import day_measures, hit_rate_curve
from gemkd.transfer.solaris.log import ITEM_FEATURES, item_feature, read_log
from gemkd.transfer.solaris.lookup import FALLBACKS, PairLookup
from gemkd.transfer.solaris.pair_store import PAIRS_FILE, PAIRS_JSON, PairStore, write_pair_store
from gemkd.transfer.solaris.policy import (
    BUILTIN_POLICIES,
    LOG_COLUMNS,
    Cooccur,
    PastLog,
    Popular,
    Recent,
    SpeculationPolicy,
    build_policy,
    check_picks,
)

__all__ = [
    "BUILTIN_POLICIES",
    "Cooccur",
    "FALLBACKS",
    "ITEM_FEATURES",
    "LOG_COLUMNS",
    "PAIRS_FILE",
    "PAIRS_JSON",
    "PairLookup",
    "PairStore",
    "PastLog",
    "Popular",
    "Recent",
    "SpeculationPolicy",
    "build_policy",
    "check_picks",
    "day_measures",
    "hit_rate_curve",
    "item_feature",
    "read_log",
    "write_pair_store",
]

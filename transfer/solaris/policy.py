"""Speculation policies: which (user, item) pairs to precompute for day d, from the log before d.

A policy is a plug-in (``class_path`` + ``init_args``, as methods are) whose ``pick(log, k)``
ranks up to ``k`` items per user. It receives a :class:`PastLog`, which holds only rows of days
before ``d`` and refuses to be built with any later row: the precomputation runs before day d
happens, so a policy that could see day d's rows (or labels: the view has none) would leak the
answer into the hit rate and into the student's input. Picks are ranked (``rank`` 0 first) and
prefix-consistent: a policy's top ``k'`` for ``k' < k`` is its ``k'`` pick, which lets one pick
give the whole hit-rate curve against K.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from gemkd.transfer.plugins import Registry, check_init_args, instantiate, resolve_class

#: The columns of a log a policy reads (``item``: the schema's item-id feature).
LOG_COLUMNS = ("day", "ts", "user_id", "item")
PICK_COLUMNS = ("user_id", "item", "rank")
#: The built-in speculation policies' names, each registered beside its class below.
BUILTIN_POLICIES = Registry("speculation policy")


class PastLog:
    """The log as of the end of day ``day - 1``: ``frame`` (``day, ts, user_id, item``) holds
    only earlier days' rows, no labels. Building one with a row of day ``day`` or later is an
    error, so no policy can be handed the day it predicts."""

    def __init__(self, frame: pd.DataFrame, day: int) -> None:
        missing = [c for c in LOG_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"a PastLog needs columns {', '.join(LOG_COLUMNS)}; missing "
                             f"{', '.join(missing)}")
        late = frame["day"] >= day
        if late.any():
            raise ValueError(f"a PastLog for day {day} was given rows of day "
                             f"{int(frame['day'][late].min())}: a policy sees only days "
                             f"before {day}")
        self.day = int(day)
        self._frame = frame.loc[:, list(LOG_COLUMNS)].reset_index(drop=True)

    @classmethod
    def before(cls, log: pd.DataFrame, day: int) -> PastLog:
        """The rows of ``log`` before ``day`` (a copy: later rows never reach the policy)."""
        return cls(log.loc[log["day"] < day, list(LOG_COLUMNS)].copy(), day)

    @property
    def frame(self) -> pd.DataFrame:
        return self._frame

    @property
    def users(self) -> pd.Index:
        """Every user seen before ``day`` (sorted): the users a policy speculates for."""
        return pd.Index(sorted(self._frame["user_id"].unique()), name="user_id")


class SpeculationPolicy:
    """Base class of the policies: ``pick(log, k)`` → a frame ``user_id, item, rank`` (rank
    0 = most likely; at most ``k`` distinct items per user, prefix-consistent)."""

    def pick(self, log: PastLog, k: int) -> pd.DataFrame:
        raise NotImplementedError


def _ranked(frame: pd.DataFrame, k: int) -> pd.DataFrame:
    """``frame`` (``user_id, item`` in each user's preference order) cut to ``k`` per user."""
    out = frame.loc[:, ["user_id", "item"]].copy()
    out["rank"] = out.groupby("user_id", sort=False).cumcount()
    out = out[out["rank"] < k]
    return out.astype({"user_id": "int64", "item": "int64", "rank": "int64"}
                      ).reset_index(drop=True)


@BUILTIN_POLICIES.register("recent")
class Recent(SpeculationPolicy):
    """The user's ``k`` most recently seen distinct items (ties: the larger item id first):
    a user sees again what was shown to them lately."""

    def pick(self, log: PastLog, k: int) -> pd.DataFrame:
        f = log.frame
        last = f.groupby(["user_id", "item"], sort=False)["ts"].max().reset_index()
        last = last.sort_values(["user_id", "ts", "item"], ascending=[True, False, False],
                                kind="stable")
        return _ranked(last, k)


@BUILTIN_POLICIES.register("popular")
class Popular(SpeculationPolicy):
    """The ``k`` items with the most impressions before the day (over the last
    ``window_days`` days when set), the same list for every user seen before the day."""

    def __init__(self, window_days: int | None = None) -> None:
        if window_days is not None and window_days < 1:
            raise ValueError(f"window_days must be >= 1 or null, got {window_days}")
        self.window_days = window_days

    def pick(self, log: PastLog, k: int) -> pd.DataFrame:
        f = log.frame
        if self.window_days is not None:
            f = f[f["day"] >= log.day - self.window_days]
        counts = f.groupby("item").size().reset_index(name="n")
        top = counts.sort_values(["n", "item"], ascending=[False, True], kind="stable")
        items = top["item"].to_numpy()[:k]
        users = log.users.to_numpy()
        grid = pd.DataFrame({"user_id": users.repeat(len(items)),
                             "item": np.tile(items, len(users))})
        return _ranked(grid, k)


@BUILTIN_POLICIES.register("cooccur")
class Cooccur(SpeculationPolicy):
    """Items seen by the same users as the user's ``history`` most recent distinct items:
    item j scores ``sum over recent i of |users who saw both i and j|`` (over the last
    ``window_days`` days when set; the recent items themselves count too), the ``k`` best with
    a positive score, ties to the smaller item id. Item-to-item collaborative filtering: it
    predicts items a user has not been shown yet, which ``recent`` cannot."""

    def __init__(self, history: int = 5, window_days: int | None = None,
                 chunk: int = 1024) -> None:
        if history < 1 or chunk < 1:
            raise ValueError(f"history and chunk must be >= 1, got {history}, {chunk}")
        if window_days is not None and window_days < 1:
            raise ValueError(f"window_days must be >= 1 or null, got {window_days}")
        self.history, self.window_days, self.chunk = history, window_days, chunk

    def pick(self, log: PastLog, k: int) -> pd.DataFrame:
        import torch

        f = log.frame
        if self.window_days is not None:
            f = f[f["day"] >= log.day - self.window_days]
        seen = f[["user_id", "item"]].drop_duplicates()
        items = np.sort(seen["item"].unique())
        if not len(items):
            return _ranked(pd.DataFrame({"user_id": [], "item": []}), k)
        users, u_at = np.unique(seen["user_id"].to_numpy(), return_inverse=True)
        i_at = np.searchsorted(items, seen["item"].to_numpy())
        x = torch.sparse_coo_tensor(torch.as_tensor(np.stack([u_at, i_at])), torch.ones(len(seen)),
                                    (len(users), len(items)), check_invariants=True).coalesce()
        with warnings.catch_warnings():  # torch's sparse product says it is beta: it is exact
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
            co = torch.sparse.mm(x.t().coalesce(), x).to_dense()  # [items, items]
        recent = Recent().pick(log, self.history)
        recent = recent[np.isin(recent["item"].to_numpy(), items)]
        who = log.users.to_numpy()
        r_user = np.searchsorted(who, recent["user_id"].to_numpy())
        r_item = np.searchsorted(items, recent["item"].to_numpy())
        parts = []
        for lo in range(0, len(who), self.chunk):
            sel = (r_user >= lo) & (r_user < lo + self.chunk)
            score = torch.zeros((min(self.chunk, len(who) - lo), len(items))).index_add_(
                0, torch.from_numpy(r_user[sel] - lo), co[torch.from_numpy(r_item[sel])]
            ).numpy()  # each user's sum of its recent items' rows of co
            order = np.argsort(-score, axis=1, kind="stable")[:, :k]  # ties: smaller item
            top = np.take_along_axis(score, order, axis=1)
            rows, cols = np.nonzero(top > 0)
            parts.append(pd.DataFrame({"user_id": who[lo + rows],
                                       "item": items[order[rows, cols]]}))
        return _ranked(pd.concat(parts, ignore_index=True), k)


_PROTOCOL = ("a speculation policy subclasses gemkd.transfer.solaris.SpeculationPolicy "
             "(pick(log, k) -> user_id, item, rank)")


def build_policy(class_path: str, init_args: Mapping[str, Any] | None = None
                 ) -> SpeculationPolicy:
    """The policy named by a built-in name (``recent``, ``popular``, ``cooccur``) or an import
    path, with its ``init_args`` checked against the constructor (a mistake is one
    ``ConfigError`` line)."""
    cls = resolve_class(class_path, "speculation policy", BUILTIN_POLICIES, SpeculationPolicy,
                        _PROTOCOL)
    args = dict(init_args or {})
    check_init_args(cls, args, "speculation policy")
    return instantiate(cls, "speculation policy", (), args)


def check_picks(picks: pd.DataFrame, k: int, where: str) -> pd.DataFrame:
    """A policy's answer, checked: the pick columns, at most ``k`` per user, no pair twice."""
    missing = [c for c in PICK_COLUMNS if c not in picks.columns]
    if missing:
        raise ValueError(f"{where}: picks lack column(s) {', '.join(missing)}")
    picks = picks.loc[:, list(PICK_COLUMNS)].astype("int64")
    if picks.duplicated(["user_id", "item"]).any():
        raise ValueError(f"{where}: a (user_id, item) pair is picked twice")
    if len(picks) and picks.groupby("user_id").size().max() > k:
        raise ValueError(f"{where}: more than k={k} items for a user")
    return picks.reset_index(drop=True)

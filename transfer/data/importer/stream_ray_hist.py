"""The import's histories on Ray (:mod:`.stream_ray`), partitioned by user.

A row's history is its user's events before it, so users split into ``shards`` (``user_id mod
shards``) that need nothing of each other: shard ``s`` is a chain of tasks, one per date in
time order, each joining the date's rows of its users to its own carried state
(``stream_write.Carry``) and handing the state to the next date's task. The writer of a date
puts the shards' histories back in the date's row order: every row's range of events is the
one the single carried state would give, so the lists written are the same, byte for byte.
"""

from __future__ import annotations

import pickle
import socket
from pathlib import Path

import numpy as np

from gemkd.transfer.data.importer.stream_write import Carry, Hist
from gemkd.transfer.errors import ConfigError

# a shard's histories of a date: its rows (places in the date), their event ranges, the events'
# times and field values
ShardHist = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]


def shared(spill: Path) -> None:
    """Raise unless this node sees the output's staging folder (made by the command's
    process), rather than write a dataset's pieces where no other node reads them."""
    if not spill.parent.is_dir():
        raise ConfigError(
            f"{spill.parent}: the output's staging folder is not on Ray node "
            f"{socket.gethostname()}: --out must be on storage every node of the cluster reads "
            "at the same path (an s3:// output is staged on the command's machine)")


def events_path(spill: Path, date: int, shard: int) -> Path:
    return spill / "events" / f"date={date}" / f"shard={shard}.pkl"


def hist_path(spill: Path, date: int, shard: int) -> Path:
    return spill / "hist" / f"date={date}" / f"shard={shard}.pkl"


def split_events(spill: Path, date: int, shards: int, user: np.ndarray, t: np.ndarray,
                 eid: np.ndarray, values: dict[str, np.ndarray]) -> None:
    """A date's events (in the date's row order) saved by shard, each row with its place."""
    shard = user % shards
    order = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    for s in range(shards):
        idx = order[bounds[s]:bounds[s + 1]]
        _dump((idx, user[idx], t[idx], eid[idx], {k: v[idx] for k, v in values.items()}),
              events_path(spill, date, s))


def join_shard(carry: Carry | None, spill: Path, date: int, shard: int, names: list[str],
               max_events: int) -> tuple[Carry, int]:
    """A shard's histories of ``date`` (its events joined to its carried state, ``None``
    before its first date), saved for the writer; the state for the shard's next date, and
    ``date`` (what the writer waits on)."""
    shared(spill)
    carry = carry if carry is not None else Carry(names, max_events)
    path = events_path(spill, date, shard)
    with open(path, "rb") as f:
        idx, user, t, eid, values = pickle.load(f)
    if len(idx):
        start, end, mt, vals = carry.join(user, t, eid, values)
        part: ShardHist = (idx, *_used(start, end, mt, vals))
    else:  # none of its users that date (the values' own dtypes: the writer concatenates)
        part = (idx, idx, idx, t, values)
    _dump(part, hist_path(spill, date, shard))
    return carry, date


def gather(spill: Path, date: int, shards: int, n: int) -> Hist:
    """A date's histories (``n`` rows) from its shards', in the date's row order."""
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    times: list[np.ndarray] = []
    values: dict[str, list[np.ndarray]] = {}
    at = 0
    for s in range(shards):
        path = hist_path(spill, date, s)
        with open(path, "rb") as f:
            part: ShardHist = pickle.load(f)
        idx, s_start, s_end, mt, vals = part
        start[idx], end[idx] = s_start + at, s_end + at
        at += len(mt)
        times.append(mt)
        for name, v in vals.items():
            values.setdefault(name, []).append(v)
    return start, end, np.concatenate(times), {k: np.concatenate(v) for k, v in values.items()}


def _used(start: np.ndarray, end: np.ndarray, t: np.ndarray, vals: dict[str, np.ndarray]
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The merged events that some row's range ``[start, end)`` covers (not the carried events
    of the shard's users absent that date), the ranges renumbered to them."""
    n = len(t)
    cover = np.cumsum(np.bincount(start, minlength=n + 1) - np.bincount(end, minlength=n + 1))
    used = cover[:n] > 0
    before = np.r_[0, np.cumsum(used)]  # used events before each place
    return before[start], before[end], t[used], {k: v[used] for k, v in vals.items()}


def _dump(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)

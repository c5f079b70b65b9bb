"""As-of join: each example receives its user's stored codes from *strictly before* its time.

LoopFM's feature for an example of user u at time t is u's history of teacher codes with
``ts < t`` — never the example itself (its own code has ``ts == t``), never anything later, and
nothing from the same second either (an equal timestamp cannot be ordered safely against the
example). The index is built once per code store; each lookup is a few ``np.searchsorted`` calls
and one gather, with no Python loop over rows.
"""

from __future__ import annotations

import numpy as np
import torch

from gemkd.transfer.ops import segment_mean
from gemkd.transfer.repr_features.codes import CodeStore


def _as_int64(name: str, a: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array [B], got {a.dtype}{list(a.shape)}")
    return a.astype(np.int64, copy=False)


class AsOfCodes:
    """Sorted, dequantised codes of one store, ready for per-batch as-of lookups.

    Keys: users are mapped to dense ranks and timestamps to ranks among the stored distinct
    timestamps, so one int64 key ``user_rank * (n_ts + 1) + ts_rank`` orders rows by
    ``(user_id, ts)`` and can never overflow (it is below ``M * (M + 1)``). For a query ``(u, t)``,
    ``searchsorted(uniq_ts, t, "left")`` is the rank that every stored ``ts < t`` is below, so one
    more ``searchsorted`` on the keys gives the end of the user's strictly-earlier events.

    Memory: ``M * code_dim`` float32 values plus three int64 arrays of length M.
    """

    def __init__(self, code_store: CodeStore, max_events: int = 50) -> None:
        if not isinstance(max_events, int) or max_events < 1:
            raise ValueError(f"max_events must be a positive int, got {max_events!r}")
        self.store, self.max_events = code_store, max_events
        self.code_dim = code_store.code_dim
        table = code_store.read(["user_id", "ts", "code"])
        uid = table.column("user_id").to_numpy()
        ts = table.column("ts").to_numpy()
        codes = code_store.codes(table)
        if len(uid) > 1 and not _is_sorted(uid, ts):  # the writer sorts; cheap check first
            order = np.lexsort((ts, uid))
            uid, ts, codes = uid[order], ts[order], codes[order]
        self._codes = np.ascontiguousarray(codes, dtype=np.float32)
        self._users, self._user_start = np.unique(uid, return_index=True)
        self._uniq_ts = np.unique(ts)
        self._stride = np.int64(len(self._uniq_ts) + 1)
        user_rank = np.repeat(np.arange(len(self._users), dtype=np.int64),
                              np.diff(np.append(self._user_start, len(uid))))
        self._keys = user_rank * self._stride + np.searchsorted(self._uniq_ts, ts)
        self._user_start = self._user_start.astype(np.int64)

    def __len__(self) -> int:
        return len(self._codes)

    def lookup(self, user_id: np.ndarray | torch.Tensor,
               ts: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(values [N, code_dim] float32, offsets [B+1] int64)``: per example, the user's most
        recent ``max_events`` codes with ``ts`` strictly before the example's, oldest first.

        Users with no earlier codes (or not in the store) get empty segments. CPU tensors; move
        them with the batch.
        """
        u = _as_int64("user_id", user_id)
        t = _as_int64("ts", ts)
        if len(u) != len(t):
            raise ValueError(f"user_id has {len(u)} rows but ts has {len(t)}")
        b = len(u)
        if len(self._users) == 0 or b == 0:
            return (torch.zeros((0, self.code_dim), dtype=torch.float32),
                    torch.zeros(b + 1, dtype=torch.int64))
        rank = np.searchsorted(self._users, u)
        np.minimum(rank, len(self._users) - 1, out=rank)
        known = self._users[rank] == u
        qkey = rank * self._stride + np.searchsorted(self._uniq_ts, t, side="left")
        end = np.searchsorted(self._keys, qkey, side="left")
        start = np.maximum(self._user_start[rank], end - self.max_events)
        lengths = np.where(known, end - start, 0)  # end >= user start for a known user
        offsets = np.zeros(b + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        n = int(offsets[-1])
        idx = np.repeat(start - offsets[:-1], lengths) + np.arange(n, dtype=np.int64)
        values = torch.from_numpy(np.take(self._codes, idx, axis=0))
        return values, torch.from_numpy(offsets)


def _is_sorted(uid: np.ndarray, ts: np.ndarray) -> bool:
    du = np.diff(uid)
    return bool((du >= 0).all() and (np.diff(ts)[du == 0] >= 0).all())


def pool_mean(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``[N, code_dim] -> [B, code_dim]`` mean of each example's codes; no history gives zeros.

    Zeros are also what a typical code looks like (tanh codes centre near 0), so a student that
    must tell "no history" from "average history" should also take ``has_history``.
    """
    return segment_mean(values, offsets)


def has_history(offsets: torch.Tensor) -> torch.Tensor:
    """``[B, 1]`` float: 1 where the example found at least one earlier code, else 0."""
    return (offsets[1:] > offsets[:-1]).to(torch.float32).unsqueeze(1)

"""The feature oracle: how much of the oracle's advantage a model could reach from what it sees.

The oracle (``p_*``) knows every user's latent vector on the day and their scalar biases; no model
does. The feature oracle rebuilds the world from ``schema.json``'s ``generator`` config and
computes the world's own probabilities with each user's latent vector replaced by what the user's
history (as written in the dataset) reveals, and the per-user scalar biases dropped (no history
reveals them). Everything else (ads, domains, context, calibration drift) stays exact, so the
gap between the feature oracle and the oracle is the part of the signal no model can learn from
features and histories, and the gap between "no user information" and the feature oracle is the
part a model could learn.

What a history reveals: each of the most recent K events contributes its item's latent vector
(a content item's own vector; an ad's vector on the event's day, dated by ``hist_age``). Per
action class (view, like, ad click or conversion) the events' vectors are summed and divided by
one plus the number of events; a linear read-out of these ``3 k`` numbers estimates the
direction of the user's vector. The read-out is fitted by ridge least squares to the true
vectors, cross-fitted across the two halves of the users (even user ids are read out by a fit on
odd ones and vice versa), so no user's own vector enters their estimate. It is the best linear
pooling of the history's item vectors: the kind of function a sequence model learns, with the
item vectors given. A history longer than ``RECENT_WINDOW`` (256) events is read at two
resolutions, all its events and its most recent 256: one read-out serves every user, and a
heavy user's whole-history average is dominated by events weeks old, so without the recent
window the longer reader would know less than the shorter one. (Richer read-outs - several
time windows for every length, decay weights, per-length read-outs - did worse out of sample:
the fit generalises across users, and a world has only a few thousand.)

Calibration: a model would learn how much to trust the estimate, so for each task a logistic
regression on the world's logit parts (``a * rest + b * user(estimate) + c``) is fitted to the
true probabilities of the same rows (three numbers per task; conversion's post-click factor is
fitted alone, weighted by the click probability). "No user information" is the same fit without
the user part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gemkd.transfer.data.dataset_writer import read_day
from gemkd.transfer.data.ranges import N_AGE_BUCKETS
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.data.synth.impressions import LabelLogits, label_logits
from gemkd.transfer.data.synth.synth_config import SynthConfig
from gemkd.transfer.data.synth.timeline import ACTION_LIKE, ACTION_VIEW
from gemkd.transfer.data.synth.world import World, build_world
from gemkd.transfer.errors import DataError
from gemkd.transfer.metrics.numerics import normalized_entropy

HISTORY_LENGTHS: tuple[int | None, ...] = (5, 20, 256, None)  # None = the whole history
N_CLASSES = 3  # view, like, ad (click or conversion)
EVENT_CHUNK = 250_000  # history events handled at once: bounds memory
RIDGE = 1e-2  # relative to the mean diagonal of the read-out's Gram matrix
# A read-out of more events than this also sees the averages of this many most recent ones.
RECENT_WINDOW = 256
# Hours since an event by hist_age bucket b (floor(log2(1 + hours))): the bucket's middle.
_BUCKET_HOURS = np.array([0.5] + [1.5 * 2.0 ** b - 1.0 for b in range(1, N_AGE_BUCKETS)])


@dataclass
class OracleProbs:
    """Probabilities per task for the rows of ``example_id``: the days in the order given, each
    day's rows in time order (the files' order)."""

    example_id: np.ndarray
    probs: dict[str, np.ndarray]


@dataclass
class _Rows:
    example_id: np.ndarray
    day: np.ndarray
    domain: np.ndarray
    user: np.ndarray
    ad: np.ndarray
    labels: dict[str, np.ndarray]
    p_true: dict[str, np.ndarray]
    offsets: np.ndarray  # [n+1] into the flat history arrays
    item: np.ndarray
    action: np.ndarray
    age: np.ndarray


def load_world(data_dir: str | Path) -> tuple[DatasetSchema, World]:
    """The dataset's schema and its world, rebuilt from the generator config and seed."""
    schema = DatasetSchema.load(data_dir)
    if schema.source != "synthetic" or not schema.generator:
        raise DataError(f"{data_dir}: not a synthetic dataset (no generator config)")
    cfg = SynthConfig(**schema.generator)
    return schema, build_world(cfg, np.random.default_rng(cfg.seed))


def _read_rows(data_dir: str | Path, schema: DatasetSchema, days, domains) -> _Rows:
    wanted = None
    if domains is not None:
        unknown = [d for d in domains if d not in schema.domains]
        if unknown:
            raise DataError(f"{data_dir}: unknown domain {unknown[0]!r}; "
                            f"domains: {', '.join(schema.domains)}")
        wanted = np.array([schema.domains.index(d) for d in domains])
    tasks = list(schema.tasks)
    cols = ["example_id", "domain", "user_id", "ad_id", *tasks, *schema.oracle.values(),
            "hist_item_id", "hist_action", "hist_age"]
    tables = []
    for day in days:
        if day not in schema.days:
            raise DataError(f"{data_dir}: no day {day} (days {schema.days[0]}..{schema.days[-1]})")
        t = read_day(data_dir, day, cols)
        if wanted is not None:
            t = t.filter(pa.array(np.isin(t["domain"].to_numpy(), wanted)))
        tables.append(t.append_column("day", pa.array(np.full(t.num_rows, day, np.int32))))
    t = pa.concat_tables(tables).combine_chunks()

    def flat(name: str) -> tuple[np.ndarray, np.ndarray]:
        arr = t[name].chunk(0) if t[name].num_chunks else pa.array([], t[name].type)
        offsets = arr.offsets.to_numpy().astype(np.int64)
        values = arr.values.to_numpy()
        return offsets - offsets[0], values[offsets[0]:offsets[-1]]

    offsets, item = flat("hist_item_id")
    _, action = flat("hist_action")
    _, age = flat("hist_age")
    return _Rows(
        example_id=t["example_id"].to_numpy(), day=t["day"].to_numpy(),
        domain=t["domain"].to_numpy().astype(np.int64), user=t["user_id"].to_numpy(),
        ad=t["ad_id"].to_numpy(),
        labels={k: t[k].to_numpy().astype(np.float64) for k in tasks},
        p_true={k: t[c].to_numpy().astype(np.float64) for k, c in schema.oracle.items()},
        offsets=offsets, item=item, action=action, age=age)


def history_features(world: World, rows: _Rows, lengths=HISTORY_LENGTHS) -> dict:
    """Per history length K (None = all): ``[n, N_CLASSES * k]``, the sum of the item vectors
    of each action class among the row's last K events, divided by one plus the number of
    events (so the classes' shares are kept, and an empty history gives 0)."""
    k = world.cfg.latent_dim
    n = len(rows.day)
    out = {K: np.zeros((n, N_CLASSES * k), np.float32) for K in lengths}
    for lo, hi in _chunks(rows):
        off, vec, cls, _, _, _ = _events(world, rows, lo, hi)
        onehot = cls[:, None] == np.arange(N_CLASSES)
        x = np.concatenate([(vec[:, None, :] * onehot[:, :, None]).reshape(len(vec), -1),
                            np.ones((len(vec), 1))], axis=1)
        cs = np.zeros((len(x) + 1, x.shape[1]))
        np.cumsum(x, axis=0, out=cs[1:])
        end = off[1:]
        for K in lengths:
            start = off[:-1] if K is None else np.maximum(off[:-1], end - K)
            t = cs[end] - cs[start]
            out[K][lo:hi] = t[:, :-1] / (1.0 + t[:, -1:])
    return out


def _chunks(rows: _Rows):
    """Row ranges ``(lo, hi)`` whose histories hold at most EVENT_CHUNK events (>= 1 row)."""
    n, ends = len(rows.day), rows.offsets[1:]
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(ends, rows.offsets[lo] + EVENT_CHUNK, side="right"))
        hi = max(hi, lo + 1)
        yield lo, hi
        lo = hi


def _events(world: World, rows: _Rows, lo: int, hi: int):
    """The history events of rows ``lo:hi``: offsets, item vectors, class, age in days, row."""
    cfg, n_ads = world.cfg, world.n_ads_total
    e0, e1 = rows.offsets[lo], rows.offsets[hi]
    off = rows.offsets[lo:hi + 1] - e0
    item, action = rows.item[e0:e1], rows.action[e0:e1]
    age_days = _BUCKET_HOURS[rows.age[e0:e1]] / 24.0
    ev_row = np.repeat(np.arange(lo, hi), np.diff(off))
    day_row = np.maximum(rows.day[ev_row] + cfg.history_days
                         - np.floor(age_days).astype(np.int64), 0)
    vec = np.empty((len(item), cfg.latent_dim), np.float64)
    is_ad = item < n_ads
    content = ~is_ad
    vec[content] = world.content_vec[item[content] - n_ads]
    vec[is_ad] = world.ad_vec[day_row[is_ad], item[is_ad]]
    cls = np.where(action == ACTION_VIEW, 0, np.where(action == ACTION_LIKE, 1, 2))
    return off, vec, cls, age_days, ev_row, day_row


def _longer(K: int | None) -> bool:
    return K is None or K > RECENT_WINDOW


def _windows(lengths) -> tuple:
    """The history windows to average over: the lengths asked for, and RECENT_WINDOW if any
    is longer."""
    extra = [RECENT_WINDOW] if any(_longer(K) for K in lengths) else []
    return tuple(dict.fromkeys([*lengths, *extra]))


def _readout_input(feats: dict, K: int | None) -> np.ndarray:
    """What the read-out of the last K events sees: their averages, and for K longer than
    RECENT_WINDOW the averages of the most recent RECENT_WINDOW events too."""
    return np.hstack([feats[K], feats[RECENT_WINDOW]]) if _longer(K) else feats[K]


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(norm > 0, x / np.maximum(norm, 1e-12), 0.0)


def estimate_user_vectors(features: np.ndarray, true_vec: np.ndarray, users: np.ndarray
                          ) -> np.ndarray:
    """Unit estimates of the users' vectors by a linear read-out of ``features``, cross-fitted:
    rows of even users are read out by a ridge fit on the rows of odd users, and vice versa, so
    no user's own true vector enters their estimate."""
    f = features.astype(np.float64)
    est = np.zeros(true_vec.shape)
    half = users % 2 == 0
    for apply in (half, ~half):
        if not apply.any():
            continue
        fit = ~apply if (~apply).any() else apply
        a = f[fit]
        gram = a.T @ a
        lam = RIDGE * max(np.trace(gram) / max(len(gram), 1), 1e-12)
        m = np.linalg.solve(gram + lam * np.eye(len(gram)), a.T @ true_vec[fit])
        est[apply] = f[apply] @ m
    return _unit(est)


def _logit_parts(world: World, rows: _Rows, user_vec: np.ndarray) -> LabelLogits:
    n = len(rows.day)
    rest, user, bias = (np.zeros((n, 3)) for _ in range(3))
    for day in np.unique(rows.day):
        m = rows.day == day
        p = label_logits(world, int(day), rows.user[m], rows.ad[m], rows.domain[m],
                         user_vec[m])
        rest[m], user[m], bias[m] = p.rest, p.user, p.user_bias
    return LabelLogits(rest, user, bias)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _fit_logistic(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None
                  ) -> np.ndarray:
    """Logits of a logistic regression of soft labels ``target`` on ``x`` (+ intercept)."""
    x = np.column_stack([x, np.ones(len(x))])
    w = np.ones(len(x)) if weight is None else weight
    b = np.zeros(x.shape[1])
    for _ in range(100):
        q = _sigmoid(x @ b)
        grad = x.T @ (w * (q - target))
        hess = (x * (w * q * (1 - q))[:, None]).T @ x + 1e-9 * np.eye(len(b))
        step = np.linalg.solve(hess, grad)
        b -= step
        if np.abs(step).max() < 1e-9:
            break
    return x @ b


def _fitted_probs(parts: LabelLogits, rows: _Rows, with_user: bool, with_bias: bool
                  ) -> dict[str, np.ndarray]:
    """Each task's probabilities from the fitted logistic calibration of the logit parts."""

    def fitted(j: int, target: np.ndarray, weight=None) -> np.ndarray:
        cols = [parts.rest[:, j]]
        if with_user:
            cols.append(parts.user[:, j])
        if with_bias and j != 1:
            cols.append(parts.user_bias[:, j])
        return _sigmoid(_fit_logistic(np.column_stack(cols), target, weight))

    p_click = rows.p_true["click"]
    q_click = fitted(0, p_click)
    p_cond = np.clip(rows.p_true["conversion"] / np.maximum(p_click, 1e-12), 0.0, 1.0)
    q_cond = fitted(1, p_cond, weight=p_click)
    return {"click": q_click, "conversion": q_click * q_cond,
            "engage": fitted(2, rows.p_true["engage"])}


def _exact_probs(parts: LabelLogits, user_bias: bool = True) -> dict[str, np.ndarray]:
    f = parts.total(user_bias=user_bias)
    q = _sigmoid(f)
    return {"click": q[:, 0], "conversion": q[:, 0] * q[:, 1], "engage": q[:, 2]}


def _check_world(rows: _Rows, parts: LabelLogits, data_dir) -> None:
    exact = _exact_probs(parts)["click"]
    if len(exact) and np.abs(exact - rows.p_true["click"]).max() > 1e-4:
        raise DataError(f"{data_dir}: the rebuilt world does not reproduce p_click (the data "
                        "was written by another version of the generator)")


def _true_vectors(world: World, rows: _Rows) -> np.ndarray:
    return world.user_vec[rows.day + world.cfg.history_days, rows.user].astype(np.float64)


def feature_oracle_probs(data_dir: str | Path, days, domains=None, max_events: int | None = None,
                         user_bias: bool = False) -> OracleProbs:
    """Feature-oracle probabilities per task for the rows of ``days`` (and ``domains``, names),
    reading at most the ``max_events`` most recent history events (None = all). ``user_bias``
    keeps the users' true scalar biases (not revealed by any history: for comparison only)."""
    schema, world = load_world(data_dir)
    rows = _read_rows(data_dir, schema, list(days), domains)
    true_vec = _true_vectors(world, rows)
    _check_world(rows, _logit_parts(world, rows, true_vec), data_dir)
    feats = history_features(world, rows, _windows([max_events]))
    est = estimate_user_vectors(_readout_input(feats, max_events), true_vec, rows.user)
    parts = _logit_parts(world, rows, est)
    return OracleProbs(rows.example_id, _fitted_probs(parts, rows, True, user_bias))


def feature_oracle_ne(data_dir: str | Path, days, domains=None,
                      lengths=HISTORY_LENGTHS, base_rates: dict[str, float] | None = None
                      ) -> pd.DataFrame:
    """NE per task (columns) of: the oracle; no user information; the feature oracle reading the
    last K events for each K of ``lengths`` (None = all); the feature oracle (all events) with
    the users' true scalar biases; the true vector without the biases. ``share_<task>`` is the
    share of the oracle's advantage over "no user information" each row reaches. NE divides by
    the entropy of ``base_rates`` (default: the label rates of the rows evaluated)."""
    schema, world = load_world(data_dir)
    rows = _read_rows(data_dir, schema, list(days), domains)
    tasks = list(schema.tasks)
    if len(rows.day) == 0:
        raise DataError(f"{data_dir}: no rows on days {list(days)} in domains {domains}")
    base = base_rates or {t: float(rows.labels[t].mean()) for t in tasks}
    true_vec = _true_vectors(world, rows)
    exact_parts = _logit_parts(world, rows, true_vec)
    _check_world(rows, exact_parts, data_dir)
    variants: list[tuple[str, dict[str, np.ndarray], int | None]] = [
        ("oracle", _exact_probs(exact_parts), None),
        ("no user information", _fitted_probs(exact_parts, rows, False, False), None)]
    lengths = list(lengths)
    feats = history_features(world, rows, _windows([*lengths, None]))
    for K in lengths:
        est = estimate_user_vectors(_readout_input(feats, K), true_vec, rows.user)
        parts = _logit_parts(world, rows, est)
        name = "feature oracle, all events" if K is None else f"feature oracle, last {K}"
        variants.append((name, _fitted_probs(parts, rows, True, False), K))
        if K is None:
            variants.append(("feature oracle, all events + user biases",
                             _fitted_probs(parts, rows, True, True), K))
    variants.append(("true vector, no user biases", _exact_probs(exact_parts, False), None))
    table = []
    for name, probs, K in variants:
        row: dict = {"variant": name, "max_events": K}
        for t in tasks:
            row[f"ne_{t}"] = normalized_entropy(rows.labels[t], probs[t], base[t])
        table.append(row)
    df = pd.DataFrame(table)
    for t in tasks:
        o, nu = df[f"ne_{t}"].iloc[0], df[f"ne_{t}"].iloc[1]
        df[f"share_{t}"] = (nu - df[f"ne_{t}"]) / (nu - o) if nu != o else np.nan
    mean_len = float(np.diff(rows.offsets).mean())
    df.attrs.update(rows=len(rows.day), mean_history=mean_len, days=list(days),
                    domains=domains, base_rates=json.loads(json.dumps(base)))
    return df

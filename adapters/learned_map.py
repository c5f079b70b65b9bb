"""What a trained Student Adapter learned (ExFM, DESIGN §5), read off real rows.

The adapter is a map from the teacher's logits (with the domain and the teacher's age) to the
logits the student distils from. Whether it can pay depends on how far the teacher is from the
fresh labels, so it is shown beside that: rows are binned by the teacher's logit of a task, and
each bin gives the teacher's mean logit, the adapter's mean output and the labels' own log-odds
(what a perfect per-bin recalibration would output). :class:`LearnedMap` accumulates those bins
and the calibration (Σp / Σy) and log loss of the targets before and after the adapter;
:func:`plot_learned_map` draws the curves of several maps (e.g. one per teacher lag).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from gemkd.transfer.methods import StepState, TeacherFn
from gemkd.transfer.metrics.numerics import log_loss_from_logits, logit, ne_from_mean_loss

#: Default bin edges in logit space: 0.5 wide from −10 to 6 (probabilities 4.5e-5 … 0.9975).
DEFAULT_EDGES = tuple(float(x) for x in np.arange(-10.0, 6.0 + 1e-9, 0.5))

_SUMS = ("n", "pos", "teacher_logit", "adapted_logit", "teacher_p", "adapted_p",
         "teacher_loss", "adapted_loss")


class LearnedMap:
    """Per task and teacher-logit bin: rows, positives, Σ teacher logit, Σ adapted logit,
    Σ σ(teacher), Σ σ(adapted) and the two log losses. Rows outside the edges fall into the
    first or last bin."""

    def __init__(self, tasks: Sequence[str], edges: Sequence[float] = DEFAULT_EDGES) -> None:
        if len(tasks) < 1:
            raise ValueError("LearnedMap needs at least one task")
        if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError(f"edges must be at least two increasing values, got {list(edges)}")
        self.tasks = list(tasks)
        self.edges = torch.tensor(list(edges), dtype=torch.float64)
        self._sums = torch.zeros(len(_SUMS), len(self.tasks), len(edges) - 1,
                                 dtype=torch.float64)

    def update(self, teacher_logits: Tensor, adapted_logits: Tensor, labels: Tensor,
               mask: Tensor | None = None) -> None:
        """``[B, T]`` teacher and adapted logits, labels in {0, 1} and a mask of the rows that
        count (the teacher found the row and the label is present); all in task order."""
        zt, za, y = (x.detach().to(torch.float64) for x in (teacher_logits, adapted_logits,
                                                             labels))
        if zt.shape != za.shape or zt.shape != y.shape or zt.shape[-1] != len(self.tasks):
            raise ValueError(f"expected [B, {len(self.tasks)}] teacher, adapted and labels, got "
                             f"{tuple(zt.shape)}, {tuple(za.shape)}, {tuple(y.shape)}")
        m = torch.ones_like(y, dtype=torch.bool) if mask is None else mask.to(torch.bool)
        bins = (torch.bucketize(zt, self.edges[1:-1], right=True)).clamp(
            0, self.edges.numel() - 2)
        values = (torch.ones_like(y), y, zt, za, torch.sigmoid(zt), torch.sigmoid(za),
                  log_loss_from_logits(y, zt), log_loss_from_logits(y, za))
        for t in range(len(self.tasks)):
            keep = m[:, t]
            b = bins[keep, t]
            for s, v in enumerate(values):
                self._sums[s, t].index_add_(0, b, v[keep, t])

    def merge(self, other: LearnedMap) -> LearnedMap:
        """Add ``other``'s rows (same tasks and edges) to this map, e.g. pool seeds or worlds."""
        if other.tasks != self.tasks or not torch.equal(other.edges, self.edges):
            raise ValueError("merge: the maps differ in tasks or edges")
        self._sums += other._sums
        return self

    def state(self) -> dict:
        """A JSON-able copy (:meth:`from_state` reads it back)."""
        return {"tasks": self.tasks, "edges": self.edges.tolist(),
                "sums": {name: self._sums[i].tolist() for i, name in enumerate(_SUMS)}}

    @classmethod
    def from_state(cls, state: dict) -> LearnedMap:
        out = cls(state["tasks"], state["edges"])
        for i, name in enumerate(_SUMS):
            out._sums[i] = torch.tensor(state["sums"][name], dtype=torch.float64)
        return out

    def table(self, min_rows: int = 1) -> pd.DataFrame:
        """One row per task and bin with at least ``min_rows`` rows: ``lo``/``hi`` (the bin's
        edges), ``rows``, ``label_rate``, ``teacher_logit`` and ``adapted_logit`` (means),
        ``label_logit`` (log-odds of the smoothed label rate (pos + ½) / (rows + 1)) and
        ``shift`` = adapted − teacher."""
        s = {name: self._sums[i].numpy() for i, name in enumerate(_SUMS)}
        rows = []
        for t, task in enumerate(self.tasks):
            for b in range(self.edges.numel() - 1):
                n = s["n"][t, b]
                if n < max(min_rows, 1):
                    continue
                rate = (s["pos"][t, b] + 0.5) / (n + 1.0)
                rows.append({"task": task, "lo": float(self.edges[b]),
                             "hi": float(self.edges[b + 1]), "rows": int(n),
                             "label_rate": s["pos"][t, b] / n,
                             "teacher_logit": s["teacher_logit"][t, b] / n,
                             "adapted_logit": s["adapted_logit"][t, b] / n,
                             "label_logit": logit(rate),
                             "shift": (s["adapted_logit"][t, b] - s["teacher_logit"][t, b]) / n})
        return pd.DataFrame(rows)

    def calibration(self) -> pd.DataFrame:
        """Per task: rows, positives, the targets' calibration Σσ(z)/Σy and NE (log loss over
        the entropy of the rows' own positive rate) for the teacher and the adapted logits."""
        s = self._sums.sum(dim=2).numpy()
        rows = []
        for t, task in enumerate(self.tasks):
            n, pos = s[0, t], s[1, t]
            p = pos / n if n else float("nan")
            rows.append({"task": task, "rows": int(n), "positives": int(pos),
                         "teacher_calibration": s[4, t] / pos if pos else float("nan"),
                         "adapted_calibration": s[5, t] / pos if pos else float("nan"),
                         "teacher_ne": ne_from_mean_loss(s[6, t] / n, p) if n else math.nan,
                         "adapted_ne": ne_from_mean_loss(s[7, t] / n, p) if n else math.nan})
        return pd.DataFrame(rows)


def collect_learned_map(method, teacher: TeacherFn, batches: Iterable, tasks: Sequence[str],
                        trained_until_day: int | None,
                        edges: Sequence[float] = DEFAULT_EDGES) -> LearnedMap:
    """Run a trained adapter method (:class:`gemkd.adapters.methods.student_adapter_method.Adapter`)
    over ``batches`` (e.g. the student's training stream again, as its KD targets saw it) and
    bin what it does: rows the teacher found, tasks whose label is present."""
    out = LearnedMap(tasks, edges)
    for batch in batches:
        step = StepState(batch, teacher, torch.device("cpu"), trained_until_day=trained_until_day)
        zt = step.teacher.logits
        za = method.adapted_logits(step)
        y = batch.labels
        mask = step.teacher.found.to(torch.bool).unsqueeze(-1) & torch.isfinite(y)
        out.update(zt, za, torch.nan_to_num(y), mask)
    return out


def plot_learned_map(maps: Mapping[str, LearnedMap], path: str | Path, min_rows: int = 50,
                     title: str = "") -> Path:
    """One panel per task: for each map (its label in the legend) the adapter's mean output
    (solid) and the labels' log-odds (dotted) against the teacher's mean logit per bin with at
    least ``min_rows`` rows, over the identity (the adapter at initialisation). A PNG, written
    atomically (the file appears whole or not at all)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gemkd.transfer.io.atomic import atomic_write_bytes

    if not maps:
        raise ValueError("plot_learned_map needs at least one map")
    tasks = next(iter(maps.values())).tasks
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        lo, hi = math.inf, -math.inf
        for i, (label, m) in enumerate(maps.items()):
            tab = m.table(min_rows)
            tab = tab[tab["task"] == task]
            if tab.empty:
                continue
            colour = f"C{i}"
            ax.plot(tab["teacher_logit"], tab["adapted_logit"], "-o", ms=3, color=colour,
                    label=f"{label}: adapter")
            ax.plot(tab["teacher_logit"], tab["label_logit"], ":", color=colour,
                    label=f"{label}: labels")
            lo = min(lo, tab["teacher_logit"].min(), tab["label_logit"].min())
            hi = max(hi, tab["teacher_logit"].max(), tab["label_logit"].max())
        if math.isfinite(lo):
            ax.plot([lo, hi], [lo, hi], color="0.6", lw=1, label="identity")
        ax.set_title(task)
        ax.set_xlabel("teacher logit (bin mean)")
        ax.set_ylabel("logit")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path

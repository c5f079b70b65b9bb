"""How much base rates move from day to day, per domain and task (``gemkd data summary --drift``).

A stale teacher is off by however much a domain's base rate moved since it trained; these figures
say how much that is in real data, in the units of the synthetic world's drift knob (logits).
A daily rate from few rows moves by sampling noise alone, so the table gives that noise too and
the movement left after it (``excess_std_logit``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.transfer.data.dataset_writer import read_day
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.metrics.numerics import logit as log_odds


def base_rate_drift(data_dir: str | Path) -> pd.DataFrame:
    """One row per domain (and ``all``) × task, over the days where the domain has rows:

    ``mean_rate`` (positives / rows), ``std_rate`` and ``std_logit`` (std over days, ddof 1, of
    the daily rate and of its logit; the logit uses (positives + 0.5) / (rows + 1) so a day
    without positives stays finite), ``mean_abs_dlogit`` (mean |change| of the daily logit
    between consecutive days), ``noise_logit`` (the std the daily logit would have from sampling
    alone at a constant rate: sqrt(mean over days of 1 / (rows · p · (1 - p)))) and
    ``excess_std_logit`` = sqrt(max(std_logit² - noise_logit², 0)).
    """
    schema = DatasetSchema.load(data_dir)
    frames = []
    for day in schema.days:
        table = read_day(data_dir, day,
            columns=["domain", *schema.tasks])
        frame = pd.DataFrame({c: table.column(c).to_numpy() for c in table.column_names})
        frame["day"] = day
        frames.append(frame)
    data = pd.concat(frames, ignore_index=True)
    rows = []
    parts = [(schema.domains[d], part) for d, part in data.groupby("domain")]
    for name, part in [*parts, ("all", data)]:
        daily = part.groupby("day")[schema.tasks].agg(["sum", "count"])
        for task in schema.tasks:
            pos = daily[(task, "sum")].to_numpy(dtype=np.float64)
            n = daily[(task, "count")].to_numpy(dtype=np.float64)
            rate = pos / n
            logit = log_odds((pos + 0.5) / (n + 1.0))
            mean = pos.sum() / n.sum()
            with np.errstate(divide="ignore"):
                noise = float(np.sqrt(np.mean(1.0 / (n * mean * (1 - mean)))))
            std_logit = float(np.std(logit, ddof=1)) if len(n) > 1 else float("nan")
            rows.append({
                "domain": name, "task": task, "days": len(n), "rows": int(n.sum()),
                "mean_rate": mean,
                "std_rate": float(np.std(rate, ddof=1)) if len(n) > 1 else float("nan"),
                "std_logit": std_logit,
                "mean_abs_dlogit": float(np.abs(np.diff(logit)).mean()) if len(n) > 1
                else float("nan"),
                "noise_logit": noise,
                "excess_std_logit": float(np.sqrt(max(std_logit**2 - noise**2, 0.0)))
                if np.isfinite(noise) and np.isfinite(std_logit) else float("nan"),
            })
    return pd.DataFrame(rows)

"""``gemkd score``: a student artifact's scores for a dataset's days, and their NE, AUC and
calibration (DESIGN §6.3).

Scores come from the artifact's exported program, the same one a serving stack would load; the
metrics are :class:`~gemkd.transfer.metrics.RankingMetrics` against the run's training base
rates (the artifact's), so on the run's evaluation days they are the run's own numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from gemkd.experiments.artifacts.student_artifact import StudentArtifact
from gemkd.experiments.report.day_unit import day_unit, window_text
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io.atomic import atomic_write_bytes


def check_schema(artifact: StudentArtifact, data: DatasetSchema, where: str) -> None:
    """The dataset's inputs are the artifact's: the same categorical features (names, order and
    id vocabularies), dense features, domains and the history fields it reads."""
    a = artifact.schema
    for kind, mine, theirs in (
            ("categorical features", [(f.name, f.cardinality) for f in a.categorical],
             [(f.name, f.cardinality) for f in data.categorical]),
            ("dense features", list(a.dense), list(data.dense)),
            ("domains", list(a.domains), list(data.domains))):
        if mine != theirs:
            raise ConfigError(f"{where}: its {kind} {theirs} are not the artifact's {mine}")
    fields = {f.name for f in data.sequence}
    missing = [s for s in artifact.sequence if s not in fields]
    if missing:
        raise ConfigError(f"{where}: no sequence field {missing[0]!r}, which the student reads")
    lacking = [t for t in artifact.tasks if t not in data.tasks]
    if lacking:
        raise ConfigError(f"{where}: no label column {lacking[0]!r} (task of the artifact)")


def check_window(schema: DatasetSchema, days: tuple[int, int], where: str) -> None:
    """A window reaching past the dataset's days is a ConfigError naming the days it has: a
    clipped window would score fewer days than asked under the asked window's name."""
    have = sorted(schema.days)
    if not have or days[0] < have[0] or days[1] > have[-1] + 1 or days[0] >= days[1]:
        raw = {"generator": schema.generator, "day_unit": getattr(schema, "day_unit", None)}
        asked = f"{day_unit(raw)}s [{days[0]}, {days[1]})"
        held = window_text(raw, have[0], have[-1] + 1) if have else "no days"
        raise ConfigError(f"{where}: {asked} reach past the data; it has {held}")


def score_artifact(artifact: str | Path, data: str | Path, days: tuple[int, int],
                   out: str | Path, batch_size: int = 4096) -> dict[str, float]:
    """Score the artifact's domain's rows of a dataset's days by its exported program
    (``gemkd score``).

    Parameters
    ----------
    artifact
        The artifact folder (``gemkd student export``).
    data
        A gemkd dataset with the artifact's features (its schema's).
    days
        The half-open day range ``(first, end)`` to score.
    out
        The Parquet file to write atomically: ``example_id``, ``user_id``, ``day``,
        ``domain``, then ``logit_<task>`` and ``p_<task>`` per task.
    batch_size
        Rows per program call.

    Returns
    -------
    dict
        The metrics against the run's training base rates: ``ne/<task>/<domain>``,
        ``auc/...``, ``calibration/...`` and ``n/...`` (domain ``all`` and each domain).

    Raises
    ------
    ConfigError
        Not an artifact, a dataset whose features are not the artifact's, days before its code
        table, or no rows to score.
    """
    from gemkd.transfer.data.dataset_reader import DatasetReader
    from gemkd.transfer.metrics import RankingMetrics

    art = StudentArtifact(artifact)
    schema = DatasetSchema.load(data)
    check_schema(art, schema, str(data))
    art.check_days(days)
    check_window(schema, days, str(data))
    domain = art.meta["student_domain"]
    reader = DatasetReader(data, days=days, batch_size=batch_size, tasks=art.tasks,
                           oracle=False, domains=[domain] if domain else None,
                           sequence=art.sequence, max_seq_len=art.max_seq_len)
    metrics = RankingMetrics(art.tasks, len(schema.domains), list(schema.domains),
                             base_rates=art.meta["base_rates"])
    columns: dict[str, list[np.ndarray]] = {"example_id": [], "user_id": [], "day": [],
                                            "domain": []}
    logits = []
    for batch in reader:
        z = art.predict(batch).float()
        mask = torch.isfinite(batch.labels)
        metrics.update(z, batch.labels, batch.domain, mask)
        logits.append(z.numpy())
        for name in columns:
            columns[name].append(getattr(batch, name).numpy())
    if not logits:
        raise ConfigError(f"{data}: no rows of domain {domain or 'any'} on days {list(days)}")
    z_all = np.concatenate(logits)
    table: dict[str, Any] = {k: np.concatenate(v) for k, v in columns.items()}
    for j, task in enumerate(art.tasks):
        table[f"logit_{task}"] = z_all[:, j].astype(np.float32)
    for j, task in enumerate(art.tasks):
        table[f"p_{task}"] = torch.sigmoid(torch.from_numpy(z_all[:, j])).numpy()
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(table), sink)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, sink.getvalue().to_pybytes())
    return {k: float(v) for k, v in metrics.compute().items()}

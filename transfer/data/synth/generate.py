"""Write the synthetic world as a day-partitioned Parquet dataset plus ``schema.json``."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from gemkd.transfer.data.dataset_writer import PART_ROWS, ROW_GROUP_SIZE, DayWriter
from gemkd.transfer.data.ranges import N_AGE_BUCKETS
from gemkd.transfer.data.schema import SCHEMA_FILE, DatasetSchema, Feature
from gemkd.transfer.data.synth.impressions import (
    add_clicks,
    impression_table,
    sample_impressions,
)
from gemkd.transfer.data.synth.synth_config import SynthConfig
from gemkd.transfer.data.synth.timeline import N_ACTIONS, Timeline, build_timeline
from gemkd.transfer.data.synth.world import (
    N_AD_FORMATS,
    N_COUNTRIES,
    N_DEVICES,
    build_world,
    domain_names,
)
from gemkd.transfer.data.synth.world import (
    N_AGE_BUCKETS as N_USER_AGE,
)
from gemkd.transfer.io.publish import output_directory

log = logging.getLogger(__name__)
TASKS = ["click", "conversion", "engage"]


def synth_schema(cfg: SynthConfig, n_ads_total: int) -> DatasetSchema:
    return DatasetSchema(
        source="synthetic",
        categorical=[
            Feature("user_id", cfg.n_users),
            Feature("ad_id", n_ads_total),
            Feature("advertiser_id", cfg.n_advertisers),
            Feature("ad_category", cfg.n_topics),
            Feature("age_bucket", N_USER_AGE),
            Feature("country", N_COUNTRIES),
            Feature("device", N_DEVICES),
            Feature("ad_format", N_AD_FORMATS),
        ],
        dense=["bid"] + [f"creative_{j}" for j in range(cfg.n_creative)],
        sequence=[
            Feature("hist_item_id", n_ads_total + cfg.n_content),
            Feature("hist_category", cfg.n_topics),
            Feature("hist_action", N_ACTIONS),
            Feature("hist_age", N_AGE_BUCKETS),
        ],
        tasks=list(TASKS),
        domains=domain_names(cfg.n_domains),
        days=list(range(cfg.n_days)),
        max_history=cfg.max_history,
        oracle={t: f"p_{t}" for t in TASKS},
    )


def generate(cfg: SynthConfig, out: str | Path, overwrite: bool = False,
             part_rows: int = PART_ROWS) -> DatasetSchema:
    """Write the synthetic world of ``cfg`` as a gemkd dataset.

    The background timeline is drawn first (the seed's stream draws every day's at once); then
    day by day the impressions are drawn, the users' last ``max_history`` events are carried
    from one day to the next (a merge, no re-sort of the timeline) and the day is written a row
    group at a time into part files, so memory is bounded by one day's scalar columns, one row
    group's histories and the users' carried events. The same config, seed and ``part_rows``
    give byte-identical Parquet; ``part_rows`` only decides where a day's rows are cut into
    files, not the rows.

    Parameters
    ----------
    cfg
        The world's knobs (docs/guides/data.md).
    out
        The dataset directory (or s3:// URI), written in a temporary directory and renamed.
    overwrite
        Replace a dataset already at ``out``.
    part_rows
        Rows of a day's part file (``part-K.parquet``): a positive multiple of the row group
        (16,384 rows).

    Returns
    -------
    DatasetSchema
        The schema written as ``schema.json``.

    Raises
    ------
    ValueError
        ``part_rows`` is not a positive multiple of the row group.
    """
    if part_rows < ROW_GROUP_SIZE or part_rows % ROW_GROUP_SIZE:
        raise ValueError(f"part_rows must be a positive multiple of {ROW_GROUP_SIZE} (whole "
                         f"row groups), got {part_rows}")
    rng = np.random.default_rng(cfg.seed)
    world = build_world(cfg, rng)
    background = build_timeline(world, rng)
    schema = synth_schema(cfg, world.n_ads_total)
    schema.generator = dict(vars(cfg))
    arrow_schema = schema.arrow_schema()
    timeline = Timeline.empty()
    with output_directory(out, overwrite=overwrite, last=(SCHEMA_FILE,)) as tmp:
        next_id = 0
        for day in range(cfg.n_days):
            row = world.day_row(day)
            background.add_to(timeline, 0 if day == 0 else row, row + 1)
            imp = sample_impressions(world, day, rng)
            writer = DayWriter(Path(tmp), day, arrow_schema, part_rows)
            for lo in range(0, len(imp), ROW_GROUP_SIZE):
                rows = slice(lo, min(lo + ROW_GROUP_SIZE, len(imp)))
                writer.add(impression_table(world, imp, rows, next_id, timeline)
                           .cast(arrow_schema))
            writer.close()
            add_clicks(timeline, world, imp)
            timeline.keep_last(cfg.max_history)
            next_id += len(imp)
            schema.rows_per_day[str(day)] = len(imp)
            log.info("day %d: %d examples", day, len(imp))
        schema.save(tmp)
    return schema

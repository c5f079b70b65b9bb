"""Write the synthetic world as a day-partitioned Parquet dataset plus ``schema.json``."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from gemkd.transfer.data.dataset_writer import write_day
from gemkd.transfer.data.ranges import N_AGE_BUCKETS
from gemkd.transfer.data.schema import SCHEMA_FILE, DatasetSchema, Feature
from gemkd.transfer.data.synth.impressions import impressions_for_day
from gemkd.transfer.data.synth.synth_config import SynthConfig
from gemkd.transfer.data.synth.timeline import N_ACTIONS, build_timeline
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


def generate(cfg: SynthConfig, out: str | Path, overwrite: bool = False) -> DatasetSchema:
    """Write the synthetic world of ``cfg`` as a gemkd dataset.

    Days are generated one at a time (memory bounded by one day) into a temporary directory,
    renamed to ``out`` at the end; the same config and seed give byte-identical Parquet.

    Parameters
    ----------
    cfg
        The world's knobs (docs/guides/data.md).
    out
        The dataset directory (or s3:// URI).
    overwrite
        Replace a dataset already at ``out``.

    Returns
    -------
    DatasetSchema
        The schema written as ``schema.json``.
    """
    rng = np.random.default_rng(cfg.seed)
    world = build_world(cfg, rng)
    timeline = build_timeline(world, rng)
    schema = synth_schema(cfg, world.n_ads_total)
    schema.generator = dict(vars(cfg))
    arrow_schema = schema.arrow_schema()
    with output_directory(out, overwrite=overwrite, last=(SCHEMA_FILE,)) as tmp:
        next_id = 0
        for day in range(cfg.n_days):
            table = impressions_for_day(world, timeline, day, next_id, rng)
            next_id += table.num_rows
            write_day(table.cast(arrow_schema), tmp, day)
            schema.rows_per_day[str(day)] = table.num_rows
            log.info("day %d: %d examples", day, table.num_rows)
        schema.save(tmp)
    return schema

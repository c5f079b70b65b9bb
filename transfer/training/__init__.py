"""Lightning training for any multi-task ranking model (teachers and students)."""

from gemkd.transfer.training.process_group import release_process_group
from gemkd.transfer.training.ranking_module import RankingModule, fsdp_mesh, shard_model
from gemkd.transfer.training.trainer import (
    ResumableLoader,
    Throughput,
    build_trainer,
    even_batch_limit,
    fit,
    make_trainer,
    training_base_rates,
    training_rates,
)

__all__ = [
    "RankingModule",
    "ResumableLoader",
    "Throughput",
    "build_trainer",
    "even_batch_limit",
    "fit",
    "fsdp_mesh",
    "make_trainer",
    "release_process_group",
    "shard_model",
    "training_base_rates",
    "training_rates",
]

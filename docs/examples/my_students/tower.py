"""A two-tower student written outside gemkd: it subclasses nothing from gemkd.

Named in an experiment's YAML as::

    student:
      class_path: my_students.tower.TwoTower
      init_args: {dim: 16, max_seq_len: 20}

gemkd calls ``TwoTower(schema, tasks, **init_args)`` and then ``model(batch, features)``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.ops import segment_sum

USER_SIDE = ["age_bucket", "country", "device"]
AD_SIDE = ["ad_id", "advertiser_id", "ad_category", "ad_format"]


def tower(in_dim: int, dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))


class TwoTower(nn.Module):
    """A user tower (user-side features, recent history, domain) and an ad tower (ad-side
    features, dense creative features) meet in an elementwise product; one linear head per task
    reads it. Representation features join the user tower through a zero-initialised projection.
    """

    def __init__(
        self,
        schema: DatasetSchema,
        tasks: list[str] | None = None,
        *,
        dim: int = 16,
        max_seq_len: int = 20,
        max_rows: int = 10_000,
        repr_dim: int = 0,
    ) -> None:
        super().__init__()
        self.tasks = list(schema.tasks if tasks is None else tasks)
        self.max_seq_len, self.repr_dim = max_seq_len, repr_dim
        # batch.categorical holds the schema's categorical features, in the schema's order
        names = [f.name for f in schema.categorical]
        card = {f.name: f.cardinality for f in [*schema.categorical, *schema.sequence]}
        self.user_side = [n for n in USER_SIDE if n in names]
        self.ad_side = [n for n in AD_SIDE if n in names]
        self.col = {n: names.index(n) for n in self.user_side + self.ad_side}
        self.emb = nn.ModuleDict(
            {n: nn.Embedding(min(card[n], max_rows), dim) for n in self.user_side + self.ad_side}
        )
        self.seq_field = schema.sequence[0].name if schema.sequence else None
        if self.seq_field is not None:
            self.emb["history"] = nn.Embedding(min(card[self.seq_field], max_rows), dim)
        self.emb["domain"] = nn.Embedding(len(schema.domains), dim)
        n_user = len(self.user_side) + 1 + (self.seq_field is not None)
        self.user_tower = tower(n_user * dim, dim)
        self.ad_tower = tower(len(self.ad_side) * dim + len(schema.dense), dim)
        if repr_dim:
            self.repr_norm = nn.LayerNorm(repr_dim)
            self.repr_proj = nn.Linear(repr_dim, dim)
            nn.init.zeros_(self.repr_proj.weight)  # at init the features change nothing
            nn.init.zeros_(self.repr_proj.bias)
        self.head = nn.Linear(dim, len(self.tasks))

    @torch.no_grad()
    def init_output_bias(self, logit: Tensor) -> None:
        """Optional hook: gemkd calls it once before training with each task's base-rate logit,
        so a rare task starts calibrated instead of near p = 0.5."""
        self.head.bias.copy_(logit.to(self.head.bias))

    def embed(self, name: str, ids: Tensor) -> Tensor:
        table = self.emb[name]
        return table(torch.remainder(ids, table.num_embeddings))  # hash ids into the table

    def recent_history(self, batch: Batch) -> Tensor:
        """Mean embedding of the ``max_seq_len`` most recent events (the last of each segment),
        computed on the device without padding and without a host sync."""
        offsets = batch.seq_offsets
        ids = batch.seq_values[self.seq_field]
        lengths = offsets[1:] - offsets[:-1]
        seg = torch.repeat_interleave(torch.arange(len(batch), device=ids.device), lengths,
                                      output_size=ids.shape[0])
        from_end = offsets[1:][seg] - 1 - torch.arange(ids.shape[0], device=ids.device)
        keep = (from_end < self.max_seq_len).unsqueeze(1)
        total = segment_sum(self.embed("history", ids) * keep, offsets)
        return total / lengths.clamp(1, self.max_seq_len).unsqueeze(1)

    def forward(self, batch: Batch, features: Tensor | None = None) -> StudentOutput:
        cat = batch.categorical
        user = [self.embed(n, cat[:, self.col[n]]) for n in self.user_side]
        user.append(self.embed("domain", batch.domain))
        if self.seq_field is not None:
            user.append(self.recent_history(batch))
        u = self.user_tower(torch.cat(user, dim=1))
        if features is not None:
            if not self.repr_dim or features.shape[-1] != self.repr_dim:
                raise ValueError(f"TwoTower: got features of width {features.shape[-1]}, "
                                 f"built with repr_dim={self.repr_dim}")
            u = u + self.repr_proj(self.repr_norm(features))
        ad = [self.embed(n, cat[:, self.col[n]]) for n in self.ad_side]
        a = self.ad_tower(torch.cat([*ad, torch.sign(batch.dense) * torch.log1p(batch.dense.abs())],
                                    dim=1))
        joint = u * a
        return StudentOutput(logits=self.head(joint), embedding=joint)

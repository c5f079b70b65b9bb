"""Parameter sharing as a transfer method (DESIGN §5): the student starts its embedding tables
from its teacher's, and may keep them frozen."""

from __future__ import annotations

import re

import torch
from torch import Tensor

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import MethodContext, TransferMethod
from gemkd.transfer.methods.base import BUILTIN_METHODS
from gemkd.transfer.models import embedding_tables


def teacher_table(weights: dict[str, Tensor], feature: str) -> Tensor | None:
    """The teacher's table for ``feature`` in a checkpoint's state dict: a key ending in
    ``tables.<feature>.weight`` (GEM, the domain FMs and the MLP ranker name them so)."""
    pattern = re.compile(rf"(^|\.)(seq_)?tables\.{re.escape(feature)}\.weight$")
    hits = [k for k in weights if pattern.search(k)]
    return weights[hits[0]].detach().float() if hits else None


def fit_width(table: Tensor, width: int) -> Tensor:
    """``[rows, d_t] → [rows, width]``: the table itself when the widths agree; otherwise its
    projection on the top principal directions (a truncated SVD keeps as much of the rows'
    geometry as ``width`` dimensions can; zero-padded if the teacher is narrower), rescaled so
    each coordinate has the student's initial scale ``width ** -0.5``."""
    if table.shape[1] == width:
        return table.clone()
    centred = table - table.mean(0, keepdim=True)
    k = min(width, table.shape[1], table.shape[0])
    _, _, vt = torch.linalg.svd(centred, full_matrices=False)
    out = torch.zeros(table.shape[0], width, dtype=table.dtype)
    out[:, :k] = centred @ vt[:k].T
    std = out[:, :k].std().clamp_min(1e-12)
    return out * (width ** -0.5 / std)


@BUILTIN_METHODS.register("param_share")
class ParamShare(TransferMethod):
    """Copy the teacher's embedding rows into the student's tables before the first step
    (row ``r`` of a student table takes the teacher's row ``r mod teacher_rows``: the same ids
    where neither table hashes), reduced to the student's width by :func:`fit_width`.
    ``freeze`` keeps them fixed; ``tables`` names which (default: every table both have).

    The student must expose ``embedding_tables() -> {feature: nn.Embedding}`` (the built-in
    students do)."""

    needs = frozenset({"teacher_weights"})

    def __init__(self, freeze: bool = False, tables: list[str] | None = None) -> None:
        super().__init__()
        self.freeze, self.tables = freeze, tables
        self.shared: list[str] = []

    def setup(self, ctx: MethodContext) -> None:
        student = ctx.student
        if student is None:
            raise ConfigError(f"method {self.name}: needs the student (MethodContext.student)")
        own = embedding_tables(student)
        if own is None:
            raise ConfigError(f"method {self.name}: student {type(student).__name__} has no "
                              "embedding_tables() to share into")
        if ctx.teacher_weights is None:
            raise ConfigError(f"method {self.name} needs a teacher checkpoint (an imported "
                              "store has no weights)")
        weights = ctx.teacher_weights()
        names = list(own) if self.tables is None else list(self.tables)
        unknown = [n for n in names if n not in own]
        if unknown:
            raise ConfigError(f"method {self.name}: the student has no table {unknown[0]!r} "
                              f"(its tables: {', '.join(own)})")
        for name in names:
            src = teacher_table(weights, name)
            if src is None:
                if self.tables is not None:
                    raise ConfigError(f"method {self.name}: the teacher has no table {name!r}")
                continue
            dst = own[name].weight
            rows = torch.arange(dst.shape[0]) % src.shape[0]
            with torch.no_grad():
                dst.copy_(fit_width(src, dst.shape[1])[rows].to(dst.dtype))
            dst.requires_grad_(not self.freeze)
            self.shared.append(name)
        if not self.shared:
            raise ConfigError(f"method {self.name}: no student table matches a teacher table")

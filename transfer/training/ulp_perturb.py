"""Numerics perturbed on purpose: a module's weights moved by one unit in the last place.

Why: a run is deterministic on one machine, and another CPU differs from it in the last bits of
its sums; moving every initial weight by one ulp makes such a difference here, so a verdict that
flips under it (``robustness:`` in a run spec) is known to be fragile."""

from __future__ import annotations

import hashlib
from typing import Any

#: What :func:`perturb_weights` knows.
PERTURBATIONS = ("ulp",)


def perturb_weights(module: Any, how: str, seed: int) -> int:
    """Move every nonzero trainable floating-point weight of ``module`` (a ``torch.nn.Module``)
    by one ulp, towards +inf or −inf as a generator seeded by ``seed`` draws (zeros stay zero:
    a denormal would slow every later step on a CPU); returns how many values moved. The
    global random state is not touched: the run's own draws (dropout, shuffles) stay as they
    were."""
    import torch

    if how not in PERTURBATIONS:
        raise ValueError(f"perturbation {how!r}: expected one of {', '.join(PERTURBATIONS)}")
    gen = torch.Generator().manual_seed(_seed(seed))
    moved = 0
    with torch.no_grad():
        for p in module.parameters():
            if not (p.requires_grad and p.is_floating_point()):
                continue
            up = torch.rand(p.shape, generator=gen) < 0.5
            inf = torch.tensor(float("inf"), dtype=p.dtype)
            target = torch.where(up.to(p.device), inf.to(p.device), -inf.to(p.device))
            nonzero = p != 0
            p.copy_(torch.where(nonzero, torch.nextafter(p, target), p))
            moved += int(nonzero.sum())
    return moved


def _seed(seed: int) -> int:
    """The direction generator's seed: the run's seed hashed, not the seed itself, so the draw
    is not the one ``torch.manual_seed(seed)`` made the weights with."""
    return int.from_bytes(hashlib.sha256(f"ulp|{seed}".encode()).digest()[:7], "big")

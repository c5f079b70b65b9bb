"""The LoopFM representation compressor: teacher embedding → small tanh-bounded Matryoshka code.

Why each piece (DESIGN §5, §9):
- *Standardised input with a floored std.* A teacher's hidden state is often nearly
  rank-deficient: some coordinates barely move. Dividing them by their own tiny std turns
  numerical noise into unit-variance "signal" that the code then spends capacity on (the
  prototype's PCA features hurt for exactly this reason). The std is floored at
  ``std_floor × max std`` (default 1%), so an empty direction stays ~0 after standardising.
  Scaling is per coordinate, never whitening: a direction that is empty in a rotated basis (the
  rank-deficient case) is stretched at most ``1 / std_floor``-fold, not to unit variance.
- *tanh code.* A bounded code quantises on a fixed grid (int8/int4, no per-row scale) and enters
  the student at a known scale.
- *Matryoshka loss.* The mean reconstruction error over code prefixes, so any prefix is a usable
  smaller code (a student with a tighter budget takes the first p dims of the same store).
- *Stop-gradient.* Teacher embeddings are data: the input is detached, nothing flows back into
  a teacher.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from gemkd.transfer.repr_features.codes import dequantize_codes, quantize_codes

__all__ = ["ReprCompressor", "dequantize_codes", "fit_compressor", "quantize_codes"]

# largest float32 below 1: tanh saturates to exactly 1.0 for pre-activations above ~9, and the
# code must stay inside the open interval (-1, 1)
_CODE_MAX = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def _default_prefixes(code_dim: int) -> list[int]:
    p, out = 1, []
    while p < code_dim:
        out.append(p)
        p *= 2
    return [*out, code_dim]


class ReprCompressor(nn.Module):
    """Encoder MLP → tanh code ``[B, code_dim]``; decoder MLP → standardised embedding.

    ``prefixes`` (default ``1, 2, 4, … , code_dim``) are the code lengths the Matryoshka loss
    trains to be usable on their own. Call ``set_standardization`` (``fit_compressor`` does)
    before use; until then the input passes unscaled.
    """

    mean: Tensor  # buffers: the standardisation, [in_dim] each
    std: Tensor

    def __init__(self, in_dim: int, code_dim: int = 16, hidden: int = 64,
                 prefixes: list[int] | None = None, std_floor: float = 1e-2) -> None:
        super().__init__()
        if in_dim < 1 or code_dim < 1 or hidden < 1:
            raise ValueError(f"in_dim, code_dim, hidden must be >= 1, got {in_dim}, {code_dim}, "
                             f"{hidden}")
        prefixes = _default_prefixes(code_dim) if prefixes is None else sorted(set(prefixes))
        if not prefixes or prefixes[0] < 1 or prefixes[-1] > code_dim:
            raise ValueError(f"prefixes must be non-empty and within [1, {code_dim}], got "
                             f"{prefixes}")
        if not 0 < std_floor < 1:
            raise ValueError(f"std_floor must be in (0, 1), got {std_floor}")
        self.in_dim, self.code_dim, self.prefixes, self.std_floor = (
            in_dim, code_dim, list(prefixes), std_floor)
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(),
                                     nn.Linear(hidden, code_dim))
        self.decoder = nn.Sequential(nn.Linear(code_dim, hidden), nn.GELU(),
                                     nn.Linear(hidden, in_dim))
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("std", torch.ones(in_dim))

    @torch.no_grad()
    def set_standardization(self, emb: Tensor) -> int:
        """Estimate mean/std from ``emb [n, in_dim]`` (training rows); returns how many
        directions were floored (near-empty: std below ``std_floor × max std``)."""
        x = emb.detach().to(torch.float64)
        if x.ndim != 2 or x.shape[1] != self.in_dim or x.shape[0] < 2:
            raise ValueError(f"need >= 2 rows of dim {self.in_dim}, got {list(x.shape)}")
        mean, std = x.mean(0), x.std(0, correction=0)
        top = float(std.max())
        # an all-constant input: every direction is empty; any positive scale keeps it at 0
        floor = self.std_floor * top if top > 0 else 1.0
        self.mean.copy_(mean.to(self.mean.dtype))
        self.std.copy_(std.clamp_min(floor).to(self.std.dtype))
        return int((std < floor).sum())

    def standardize(self, emb: Tensor) -> Tensor:
        """``(emb - mean) / std`` on a detached input: the teacher gets no gradient."""
        return (emb.detach().to(self.mean.dtype) - self.mean) / self.std

    def encode_standardized(self, z: Tensor) -> Tensor:
        return torch.tanh(self.encoder(z)).clamp(-_CODE_MAX, _CODE_MAX)

    def encode(self, emb: Tensor) -> Tensor:
        """Teacher embedding ``[B, in_dim]`` → code ``[B, code_dim]`` in ``(-1, 1)``."""
        return self.encode_standardized(self.standardize(emb))

    def decode(self, code: Tensor, prefix: int | None = None) -> Tensor:
        """Code → standardised reconstruction, keeping only the first ``prefix`` dims."""
        if prefix is not None and prefix < self.code_dim:
            mask = torch.zeros(self.code_dim, dtype=code.dtype, device=code.device)
            mask[:prefix] = 1
            code = code * mask
        return self.decoder(code)

    def forward(self, emb: Tensor) -> Tensor:
        return self.encode(emb)

    def matryoshka_loss(self, emb: Tensor) -> tuple[Tensor, dict[int, Tensor]]:
        """Mean over prefixes of the standardised-space reconstruction MSE; also per prefix."""
        z = self.standardize(emb)
        code = self.encode_standardized(z)
        per = {p: torch.mean((self.decode(code, p) - z) ** 2) for p in self.prefixes}
        return torch.stack(list(per.values())).mean(), per

    @torch.no_grad()
    def r2(self, emb: Tensor, batch_size: int = 8192) -> dict[int, float]:
        """Per-prefix R² = 1 − SSE / SST in standardised space (SST around the stored mean).

        Standardised space is what the loss sees: every direction with real variance counts the
        same, and floored (empty) directions contribute ~0 to both sums.
        """
        sse = dict.fromkeys(self.prefixes, 0.0)
        sst = 0.0
        for i in range(0, emb.shape[0], batch_size):
            z = self.standardize(emb[i:i + batch_size])
            code = self.encode_standardized(z)
            sst += float((z.double() ** 2).sum())
            for p in self.prefixes:
                sse[p] += float(((self.decode(code, p) - z).double() ** 2).sum())
        return {p: (1.0 - sse[p] / sst) if sst > 0 else float("nan") for p in self.prefixes}


def fit_compressor(emb: np.ndarray | Tensor, code_dim: int = 16, epochs: int = 20,
                   batch_size: int = 256, lr: float = 3e-3, seed: int = 0,
                   hidden: int = 64, prefixes: list[int] | None = None,
                   heldout_frac: float = 0.1,
                   std_floor: float = 1e-2) -> tuple[ReprCompressor, dict]:
    """Train a compressor on teacher embeddings ``[n, in_dim]`` (float, finite).

    A random ``heldout_frac`` of rows (seeded) is kept out; standardisation statistics come from
    the training rows only. Returns the model (eval mode, CPU) and
    ``{"r2": {prefix: held-out R²}, "loss": last epoch's mean training loss,
    "floored_dims": n, "train_rows": n, "heldout_rows": n}``. The global RNG is left untouched;
    torch's thread count is the caller's (a tiny MLP on a busy machine runs far faster on one).
    """
    x = torch.as_tensor(np.asarray(emb) if not isinstance(emb, Tensor) else emb)
    x = x.detach().to("cpu", torch.float32)
    if x.ndim != 2 or x.shape[0] < 4:
        raise ValueError(f"emb must be [n >= 4, in_dim], got {list(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError("emb contains NaN or inf")
    if not 0 < heldout_frac < 1:
        raise ValueError(f"heldout_frac must be in (0, 1), got {heldout_frac}")
    n = x.shape[0]
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    n_held = min(max(1, int(round(n * heldout_frac))), n - 2)
    held, train = x[perm[:n_held]], x[perm[n_held:]]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ReprCompressor(x.shape[1], code_dim, hidden, prefixes, std_floor)
    floored = model.set_standardization(train)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = max(1, math.ceil(len(train) / batch_size))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs * steps))
    model.train()
    last = float("nan")
    for _ in range(epochs):
        order = torch.randperm(len(train), generator=gen)
        total = 0.0
        for i in range(steps):
            loss, _ = model.matryoshka_loss(train[order[i * batch_size:(i + 1) * batch_size]])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item()
        last = total / steps
    model.eval()
    return model, {"r2": model.r2(held), "loss": last, "floored_dims": floored,
                   "train_rows": len(train), "heldout_rows": n_held}

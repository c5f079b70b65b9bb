"""Auxiliary distillation head with gradient scaling (ExFM, DESIGN §5).

The student keeps a serving head trained on labels; this separate head learns the teacher's
targets from the student's shared trunk. ``beta`` scales only the gradient that flows from this
head back into the trunk (identity forward, ×β backward), so distillation shapes the trunk
without overwhelming the serving objective. Only the serving head is evaluated and served.
"""

from __future__ import annotations

import torch
from torch import nn

from gemkd.transfer.packs import stacked


def scale_grad(x: torch.Tensor, beta: float | torch.Tensor) -> torch.Tensor:
    """Identity in the forward pass; multiplies the incoming gradient by ``beta``.

    A view of ``x`` with a gradient hook ``g · β``: the same product a custom autograd Function's
    backward computes, at half its cost a step (~15 against ~30 us on the CPU: no Python
    ``forward``/``backward`` pair, no saved context). At β = 1 it is ``x`` itself. A tensor β (a
    pack's per-member knob, :mod:`gemkd.transfer.packs.pack`, where a hook cannot be set per
    member) is ``x_d + β · (x - x_d)`` with ``x_d`` detached: the forward adds an exact 0, the
    backward is ``g · β``, the same values. So is any β inside a ``torch.func`` transform (a
    batched pack's vmap): a hook set on the transform's wrapper tensor is silently never
    called, so the gradient would not be scaled at all."""
    if isinstance(beta, torch.Tensor) or torch._C._functorch.is_functorch_wrapped_tensor(x):
        frozen = x.detach()
        if isinstance(beta, torch.Tensor) and beta.dim():  # a stacked pack's [K, 1, 1]
            beta = beta.to(x.dtype)
        return frozen + beta * (x - frozen)
    beta = float(beta)
    if beta == 1.0:
        return x
    y = x.view_as(x)
    if y.requires_grad and torch.is_grad_enabled():
        y.register_hook(lambda grad: grad * beta)
    return y


class AuxDistillHead(nn.Module):
    """``ŷ_D = head(scale_grad(trunk, β))`` with one logit per task."""

    def __init__(self, in_dim: int, n_tasks: int, beta: float = 1.0, hidden: int = 0) -> None:
        super().__init__()
        if in_dim < 1 or n_tasks < 1:
            raise ValueError(f"AuxDistillHead needs in_dim >= 1 and n_tasks >= 1, got "
                             f"{in_dim}, {n_tasks}")
        self.beta = float(beta)
        layers: list[nn.Module] = []
        if hidden:
            layers += [nn.Linear(in_dim, hidden), nn.ReLU()]
            in_dim = hidden
        layers.append(nn.Linear(in_dim, n_tasks))
        self.net = nn.Sequential(*layers)

    def forward(self, trunk: torch.Tensor) -> torch.Tensor:
        x = scale_grad(trunk, self.beta)
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        if last.weight.dim() == 2:
            return self.net(x)
        # a stacked pack's members at once: weights [K, out, in], trunk [K, B, in]
        for layer in self.net:
            x = stacked.linear(x, layer.weight, layer.bias) if isinstance(layer, nn.Linear) \
                else layer(x)
        return x

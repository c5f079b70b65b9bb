"""Whether K built runs can train as one pack, and what they differ in: the checks behind
:class:`PackError`, the float knobs a batched pack passes per member, and each parameter's
optimiser settings as the member's own run would build them
(:class:`~gemkd.transfer.packs.pack.PackedDistill` reads them at construction)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from gemkd.transfer.distill.module import DistillModule
from gemkd.transfer.training.flat_adamw import FlatAdamW

#: attributes of the template that differ per member by design and that the pack replaces
_OWN = {"": ("teacher", "lr", "embedding_lr", "last_metrics")}
#: submodules each member keeps for itself (its evaluation metrics)
_OWN_MODULES = ("val_metrics", "test_metrics")


class PackError(ValueError):
    """The members cannot be trained as one pack (the message says why)."""


def _plain_attrs(module: nn.Module) -> dict[str, Any]:
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and k != "training" and not callable(v)}


def member_knobs(members: Sequence[nn.Module]) -> dict[tuple[str, str], list[float]]:
    """``(module path, attribute) → one value per member`` for every plain float attribute of
    the members' submodules that is not the same for all; :class:`PackError` for any other
    attribute that differs (a width, a choice, an object) or a structure that does."""
    base = dict(members[0].named_modules())
    knobs: dict[tuple[str, str], list[float]] = {}
    for other in members[1:]:
        if list(dict(other.named_modules())) != list(base):
            raise PackError("the members' modules differ in structure")
    for path, module in base.items():
        if path.split(".")[0] in _OWN_MODULES:
            continue
        own = _OWN.get(path, ())
        peers = [dict(m.named_modules())[path] for m in members]
        if any(type(p) is not type(module) for p in peers):
            raise PackError(f"module {path!r} differs in class between members")
        attrs = [_plain_attrs(p) for p in peers]
        for name, value in attrs[0].items():
            if name in own:
                continue
            values = [a.get(name) for a in attrs]
            if all(same_value(value, v) for v in values[1:]):
                continue
            floats = [float(v) for v in values if type(v) is float]
            if len(floats) == len(values):
                knobs[(path, name)] = floats
            else:
                raise PackError(f"{type(module).__name__}.{name} ({path or 'module'}) differs "
                                f"between members: {values}")
    return knobs


def same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape \
            and a.dtype == b.dtype and bool(torch.equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # an object without a usable ==: only itself is the same
        return False


def aliases(module: nn.Module, name: str) -> list[str]:
    """Every name of the parameter or buffer ``name`` of ``module`` (more than one if tied)."""
    target = module.get_parameter(name) if name in dict(module.named_parameters()) \
        else module.get_buffer(name)
    named = [*module.named_parameters(remove_duplicate=False),
             *module.named_buffers(remove_duplicate=False)]
    return [n for n, t in named if t is target]


def param_settings(member: DistillModule) -> tuple[dict[str, dict[str, Any]], list[Any]]:
    """Each trained parameter's optimiser settings, by name, from the member's own
    ``configure_optimizers`` (its groups as a run builds them), and its other optimisers."""
    optimizers = member.configure_optimizers()
    main = optimizers[0] if isinstance(optimizers, list) else optimizers
    rest = optimizers[1:] if isinstance(optimizers, list) else []
    if not isinstance(main, FlatAdamW | torch.optim.AdamW):
        raise PackError(f"the student's optimiser is {type(main).__name__}, not AdamW")
    names = {id(p): n for n, p in member.named_parameters()}
    out = {}
    for g in main.param_groups:
        if g["amsgrad"] or g["maximize"] or not g.get("decoupled_weight_decay", True):
            raise PackError("a pack runs AdamW without amsgrad or maximize")
        for p in g["params"]:
            out[names[id(p)]] = {"lr": float(g["lr"]), "weight_decay": float(g["weight_decay"]),
                                 "betas": tuple(g["betas"]), "eps": float(g["eps"]),
                                 "rule": g.get("table_rule", "dense_adamw")}
    return out, rest

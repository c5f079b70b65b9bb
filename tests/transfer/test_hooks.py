"""The optional hooks of teachers, students and methods (``gemkd.transfer.models.OptionalHooks``):
declared once, looked up in one place (``optional_hook``), with their defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from gemkd.transfer.models import (
    HOOKS,
    OptionalHooks,
    embedding_tables,
    fsdp_units,
    optional_hook,
    start_output_bias,
)

ROOT = Path(__file__).resolve().parents[2]


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))


class Hooked(Plain):
    def __init__(self) -> None:
        super().__init__()
        self.seen = None
        self.table = nn.Embedding(4, 2)

    def init_output_bias(self, logit: torch.Tensor) -> None:
        self.seen = logit

    def fsdp_units(self) -> list[nn.Module]:
        return [self.a, self.b, self.b[1], self.a]  # a duplicate: kept once

    def fsdp_wrap_modules(self):
        return (nn.Embedding,)  # fsdp_units wins

    def embedding_tables(self) -> dict[str, nn.Embedding]:
        return {"ad_id": self.table}


class WrapsClasses(Plain):
    def fsdp_wrap_modules(self):
        return (nn.Linear, self.b)


def test_the_hooks_are_the_protocols_members():
    assert HOOKS == {"from_config", "init_output_bias", "fsdp_units", "fsdp_wrap_modules",
                     "embedding_tables"}
    assert all(getattr(OptionalHooks, name).__doc__ for name in HOOKS)


def test_optional_hook_finds_a_defined_hook_or_none():
    model = Hooked()
    assert optional_hook(model, "init_output_bias") == model.init_output_bias
    assert optional_hook(Plain(), "init_output_bias") is None
    odd = Plain()
    odd.embedding_tables = 3  # not callable: not a hook
    assert optional_hook(odd, "embedding_tables") is None
    with pytest.raises(ValueError, match="not an optional hook"):
        optional_hook(model, "init_output_biass")


def test_the_defaults_of_each_hook():
    model, plain = Hooked(), Plain()
    logit = torch.tensor([-2.0])
    start_output_bias(model, logit)
    assert model.seen is logit
    start_output_bias(model, None)  # no base rates: nothing
    assert model.seen is logit
    start_output_bias(plain, logit)  # no hook: nothing
    assert embedding_tables(model) == {"ad_id": model.table} and embedding_tables(plain) is None
    assert fsdp_units(plain) == []  # one unit: the model


def test_fsdp_units_deepest_first_each_once():
    model = Hooked()
    assert fsdp_units(model) == [model.b[1], model.b, model.a]
    wraps = WrapsClasses()
    assert fsdp_units(wraps) == [wraps.b[1], wraps.b[0], wraps.b, wraps.a]


def test_no_hook_is_looked_up_by_name_elsewhere():
    """``optional_hook`` is the one place: no getattr/hasattr of a hook's name in the packages."""
    names = "|".join(sorted(HOOKS))
    probe = re.compile(rf"(getattr|hasattr)\([^)]*[\"']({names})[\"']")
    found = [f"{p.relative_to(ROOT)}:{i}" for pkg in ("transfer", "teachers", "students",
                                                        "adapters", "experiments")
             for p in (ROOT / pkg).rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert found == []

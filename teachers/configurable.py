"""What every teacher shares: built from a YAML ``model:`` mapping, named representations."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch import nn

from transfer.data.schema import DatasetSchema
from transfer.errors import ConfigError


class ConfigurableTeacher(nn.Module):
    """Mixin base: keyword-only ``__init__`` arguments are the config keys; subclasses fill
    ``self._repr_dims`` ({name: width}) with the representations ``forward`` returns."""

    _repr_dims: dict[str, int]

    @classmethod
    def hparam_names(cls) -> list[str]:
        """The keyword hyper-parameters ``__init__`` accepts, subclasses' first."""
        names: list[str] = []
        for klass in cls.__mro__:
            if klass in (ConfigurableTeacher, nn.Module):
                break
            for p in inspect.signature(klass.__init__).parameters.values():
                if p.kind is p.KEYWORD_ONLY and p.name not in names:
                    names.append(p.name)
        return names

    @classmethod
    def from_config(cls, schema: DatasetSchema, config: Mapping[str, Any]):
        """Build from a YAML ``model:`` mapping; unknown keys raise :class:`ConfigError`."""
        known = cls.hparam_names()
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ConfigError(
                f"{cls.__name__}: unknown model key(s) {unknown}; known keys: {known}"
            )
        return cls(schema, **dict(config))

    def representation_names(self) -> list[str]:
        return list(self._repr_dims)

    def representation_dims(self) -> dict[str, int]:
        return dict(self._repr_dims)

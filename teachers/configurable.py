"""What every teacher shares: built from a YAML ``model:`` mapping, named representations."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from torch import nn

from gemkd.transfer.config import build_dataclass
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError

C = TypeVar("C", bound="ModelConfig")

log = logging.getLogger(__name__)


def resolve_use_sequence(owner: str, requested: bool | None, schema: DatasetSchema) -> bool:
    """Whether ``owner`` builds its sequence arm: ``None`` (auto) iff the schema has sequence
    fields. ``True`` on a history-less schema (an imported log without ``history``) adapts too,
    with a warning: the shipped configs say ``true``, and a model without the arm is what such
    data allows; only ``False`` turns the arm off where the data has histories."""
    if requested not in (None, True, False):
        raise ConfigError(f"{owner}: use_sequence must be true, false or null (auto: the "
                          f"sequence arm iff the dataset has sequence fields), got {requested!r}")
    has_history = bool(schema.sequence)
    if requested is None:
        if not has_history:
            log.info("%s: the dataset has no sequence fields; built without its sequence arm",
                     owner)
        return has_history
    if requested and not has_history:
        log.warning("%s: use_sequence is true but the dataset has no sequence fields (no "
                    "history): built without its sequence arm; set use_sequence: false or null "
                    "(auto) to silence this", owner)
        return False
    return bool(requested)


class ModelConfig:
    """Base of a teacher's frozen config dataclass (``GEMConfig``, ``MLPRankerConfig``): built
    from a ``model:`` mapping by the one validator, turned back into one, copied with changes.
    ``source`` (what errors name) defaults to :attr:`OWNER`."""

    #: the model class the errors name by default
    OWNER: ClassVar[str] = "model"

    @classmethod
    def from_mapping(cls: type[C], values: Mapping[str, Any], source: str | None = None) -> C:
        """Build from a ``model:`` mapping.

        Parameters
        ----------
        values
            The keys and their values.
        source
            What the errors name (the model class, or a file; default :attr:`OWNER`).

        Returns
        -------
        ModelConfig
            An instance of the class it is called on.

        Raises
        ------
        ConfigError
            Naming ``source`` and the key: an unknown key, a wrong type, a value outside its
            choices or a broken rule.
        """
        return build_dataclass(cls, dict(values), source or cls.OWNER)

    def to_dict(self) -> dict[str, Any]:
        """The keys as a plain mapping (YAML-able: what a ``model:`` section holds)."""
        return {f.name: getattr(self, f.name)
                for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def replace(self: C, source: str | None = None, **changes: Any) -> C:
        """A copy with ``changes``, checked as :meth:`from_mapping` checks."""
        return type(self).from_mapping({**self.to_dict(), **changes}, source)


def built_config(config_class: type[C], config: C | None, hparams: dict[str, Any],
                 owner: str) -> C:
    """A model's config from ``Model(schema, config)`` or ``Model(schema, key=...)``: keys given
    beside a config replace its values; anything but a ``config_class`` instance is refused."""
    if config is None:
        return config_class.from_mapping(hparams, owner)
    if not isinstance(config, config_class):
        article = "an" if config_class.__name__[0] in "AEIMO" else "a"  # an MLP..., a GEM...
        raise ConfigError(f"{owner}: config must be {article} {config_class.__name__}, got "
                          f"{type(config).__name__} (a mapping: {owner}.from_config)")
    return config.replace(owner, **hparams) if hparams else config


class ConfigurableTeacher(nn.Module):
    """Mixin base: the config keys are the keyword-only ``__init__`` arguments and, where the
    class names one, the fields of its ``config_class`` dataclass (GEM's ``GEMConfig``);
    subclasses fill ``self._repr_dims`` ({name: width}) with the representations ``forward``
    returns."""

    _repr_dims: dict[str, int]
    #: a dataclass whose fields are (more) config keys, taken as ``**hparams`` by ``__init__``
    config_class: ClassVar[type | None] = None

    @classmethod
    def hparam_names(cls) -> list[str]:
        """The keyword hyper-parameters ``__init__`` accepts, subclasses' first, then the
        fields of ``config_class``."""
        names: list[str] = []
        for klass in cls.__mro__:
            if klass in (ConfigurableTeacher, nn.Module):
                break
            for p in inspect.signature(klass).parameters.values():  # its __init__'s, less self
                if p.kind is p.KEYWORD_ONLY and p.name not in names:
                    names.append(p.name)
        if cls.config_class is not None:
            names += [f.name for f in dataclasses.fields(cls.config_class) if f.name not in names]
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

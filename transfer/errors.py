"""One exception family for every failure a user can cause.

The CLI turns any ``GemkdError`` into a single ``error: ...`` line and exit code 2, so each
message must say on its own which file, column, row or key is wrong and what was expected.
"""

from __future__ import annotations


class GemkdError(Exception):
    """Base class: a user-facing error with a complete, one-line message."""


class ConfigError(GemkdError):
    """A config file or value is missing, unknown, or of the wrong type."""


class DataError(GemkdError):
    """An input dataset is missing, malformed, or violates the schema."""


class StoreError(GemkdError):
    """A teacher-output store is incomplete, inconsistent, or incompatible."""

"""gemkd's version: the installed distribution's, or the source tree's when not installed."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gemkd")
except PackageNotFoundError:  # run from a source tree without pip install
    __version__ = "0.0.0+source"

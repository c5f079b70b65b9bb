"""What a command prints on stderr: gemkd's progress lines, Lightning's info lines (device
banners, model summaries, tips) only with ``-v``, warnings and errors always.

Lightning logs its banners at INFO through a stderr handler it adds on import; here every record
goes through one handler whose level ``-v`` sets. The one
warning filtered is a deprecation inside Lightning's own code that no gemkd input can avoid.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings

_LIGHTNING = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning",
              "lightning_fabric")


class _Stderr(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is now (tests and notebooks replace it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


_handler: _Stderr | None = None


def configure(verbose: bool, lightning: bool = False) -> None:
    """Route every log record to stderr at INFO (``-v``) or WARNING, Lightning's included;
    ``lightning``: the command uses it, so import it now (its import adds a handler of its own,
    which is taken off here)."""
    global _handler
    if lightning:
        importlib.import_module("lightning.pytorch")  # binds no name over the argument
    root = logging.getLogger()
    if _handler is None:
        _handler = _Stderr()
        _handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        root.addHandler(_handler)
    level = logging.INFO if verbose else logging.WARNING
    _handler.setLevel(level)
    root.setLevel(level)
    for name in _LIGHTNING:
        lg = logging.getLogger(name)
        for h in list(lg.handlers):  # Lightning's own stderr handler: records go to ours
            if isinstance(h, logging.StreamHandler) and not isinstance(h, _Stderr):
                lg.removeHandler(h)
        lg.propagate = True
        lg.setLevel(logging.NOTSET)  # the root's level decides (a caller may have set another)
    # Lightning 2.6's CombinedLoader builds a torch LeafSpec for every loader, which torch 2.13
    # deprecates: printed on every fit, and nothing a user passes changes it
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            module=r"lightning\.pytorch\.utilities\._pytree")

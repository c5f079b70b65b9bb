"""A persistent home for ``torch.compile``'s on-disk caches.

Why: a compiled GEM costs minutes of compilation on its first steps. Inductor keeps the compiled
FX graphs and AOTAutograd's forward/backward pairs on disk, so a later process that compiles the
same graphs loads them instead, but by default under ``/tmp/torchinductor_<user>``: a folder
``/tmp`` cleaning or a new container loses, shared by every project of the user. gemkd points
it at one folder per user that outlives them (or the one its user names), once per process,
before the first compile; a ``TORCHINDUCTOR_CACHE_DIR`` already set is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

#: names the folder (else ``$XDG_CACHE_HOME/gemkd/torch_compile``, ``~/.cache/...``)
ENV = "GEMKD_COMPILE_CACHE"
TORCH_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compile_cache_dir() -> Path:
    """The folder gemkd keeps compiled graphs in: ``$GEMKD_COMPILE_CACHE``, else
    ``$XDG_CACHE_HOME/gemkd/torch_compile`` (``~/.cache`` when unset)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gemkd" / "torch_compile"


def use_compile_cache(path: str | Path | None = None) -> Path:
    """Point inductor's caches at ``path`` (default :func:`compile_cache_dir`) and turn on the
    FX-graph and AOTAutograd caches (torch's defaults, stated so a changed default does not
    silently cost the minutes again).

    Parameters
    ----------
    path:
        The cache folder; created if missing. Ignored when ``TORCHINDUCTOR_CACHE_DIR`` is set:
        the user's own choice wins.

    Returns
    -------
    The folder inductor now uses.

    Raises
    ------
    OSError
        The folder cannot be created (read-only home, a file in the way).
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    if os.environ.get(TORCH_ENV):
        return Path(os.environ[TORCH_ENV])
    folder = Path(path).expanduser() if path is not None else compile_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[TORCH_ENV] = str(folder.resolve())  # inductor reads it on every cache access
    return folder.resolve()

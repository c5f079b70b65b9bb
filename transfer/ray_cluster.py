"""Ray, when a command hands work to a Ray cluster (``gemkd run --executor ray``, ``gemkd data
import --engine ray``): the import with its one clear error, the connection to the cluster at
``RAY_ADDRESS`` (or a local instance), and the signal handlers ``ray.init`` would leave behind."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.process_reaper import reap_on_death


@contextmanager
def kept_handlers(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """The handlers of ``signals`` as they were before the block, whatever it installs (Ray's
    ``init`` replaces SIGTERM's by one that raises ``SystemExit(15)`` wherever the process
    happens to be)."""
    before = {s: signal.getsignal(s) for s in signals}
    try:
        yield
    finally:
        for s, handler in before.items():
            if handler is not None:
                try:
                    signal.signal(s, handler)
                except ValueError:  # not the main thread: nothing could be installed either
                    pass


def import_ray(what: str) -> Any:
    """The ``ray`` module.

    Raises
    ------
    ConfigError
        Saying that ``what`` (e.g. ``--engine ray``) needs Ray and how to install it.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{what} needs Ray: pip install 'gemkd[ray]'") from None
    return ray


@contextmanager
def ray_connected(what: str, **init: Any) -> Iterator[Any]:
    """Ray, connected for the block: the instance this process already joined, else the cluster
    at ``RAY_ADDRESS`` (or one ``ray start`` began on this machine, or a new local instance),
    which is then left at the block's end. ``init``: more ``ray.init`` arguments.

    Raises
    ------
    ConfigError
        Ray is not installed, or the cluster does not answer.
    """
    ray = import_ray(what)
    started = not ray.is_initialized()
    if started:
        address = os.environ.get("RAY_ADDRESS")
        try:
            with kept_handlers():  # ray.init makes SIGTERM sys.exit(15) for good
                ray.init(address=address, include_dashboard=False, log_to_driver=False, **init)
            reap_on_death()  # a local instance's agents outlive a killed driver by ~60 s
        except ConnectionError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(
                f"{what}: could not connect to the Ray cluster at RAY_ADDRESS={address} "
                f"({first}); is it up (`ray status`)? A cluster with token authentication also "
                "needs RAY_AUTH_MODE=token and its token on this machine") from None
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()

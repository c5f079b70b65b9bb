"""Closing what a distributed fit leaves open, before the process exits.

Lightning's strategies leave torch.distributed's default group open after ``fit``, and under
FSDP (``ModelParallelStrategy``) the DeviceMesh it builds keeps its own process groups too: a
mesh stays referenced after the fit (DTensor's sharding caches hold it), and
``destroy_process_group`` neither closes nor forgets a mesh's groups. Their gloo and TCPStore
threads then ran until the interpreter's exit, where a rank could abort after a run that
succeeded ("terminate called without an active exception", signal 6).
"""

from __future__ import annotations

import gc

import torch


def release_process_group() -> None:
    """Destroy torch.distributed's process groups, those a DeviceMesh keeps included, so that
    no gloo thread outlives them. Call it once a process has no more collective work (the CLI
    does after every command that trained); without an open group it does nothing."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    torch.distributed.destroy_process_group()
    from torch.distributed.device_mesh import DeviceMesh

    gc.collect()  # a finished fit's trainer and module (FSDP's state holds groups too)

    # a mesh's groups are held in its private ``_pg_registry`` (torch 2.13), which no public
    # call clears; with them dropped the groups' destructors join their threads here
    for obj in gc.get_objects():
        if isinstance(obj, DeviceMesh):
            registry = getattr(obj, "_pg_registry", None)
            if isinstance(registry, dict):
                registry.clear()
    gc.collect()

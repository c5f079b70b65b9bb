"""The enumerations that configs, specs and commands choose from, each defined once.

Each is a ``Literal`` type: a config field annotated with it is checked by
:func:`gemkd.transfer.config.check_value` (an unknown value is an error naming the key and the
choices), and :func:`choices` gives its values in order, for ``argparse`` ``choices`` and for
messages. This module imports nothing heavy, so a command's parser can read it without loading
torch.
"""

from __future__ import annotations

import typing
from typing import Literal

#: How a teacher fit runs: one process, DDP (gloo on CPU, nccl on GPU) or FSDP2
#: (``gemkd.transfer.training.trainer``)
Strategy = Literal["auto", "ddp", "fsdp"]
#: How a teacher-output store keeps the representation (``gemkd.transfer.store``)
EmbDtype = Literal["float16", "int8"]
#: The experiment trackers a fit can log to besides ``metrics.csv``
#: (``gemkd.transfer.training.loggers``)
TrackerKind = Literal["csv", "tensorboard", "mlflow"]


def choices(kind: typing.Any) -> tuple[str, ...]:
    """The values of a ``Literal`` type, in their declared order."""
    if typing.get_origin(kind) is not Literal:
        raise TypeError(f"{kind!r} is not a Literal type")
    return typing.get_args(kind)


STRATEGIES = choices(Strategy)
EMB_DTYPES = choices(EmbDtype)
TRACKERS = choices(TrackerKind)

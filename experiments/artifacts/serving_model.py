"""A kept student as a model of plain tensors: what ``torch.export`` turns into a program a
serving stack runs without gemkd's batch type, readers or stores (DESIGN §6.3).

A student's forward reads a :class:`~gemkd.transfer.data.Batch`; the serving model takes the
batch's tensors (dense, categorical, domain, the histories as jagged values sharing one offsets
tensor) and, for a student that reads LoopFM codes, the user's as-of codes as jagged values
with their offsets, pools them as the training run's method did, and returns the student's
serving logits ``[B, n_tasks]``. The as-of lookup itself (which codes a user had before the
impression's time) is a host index over the artifact's code table, outside the program:
:class:`~gemkd.experiments.artifacts.student_artifact.StudentArtifact` does it.

Histories must arrive cut to the student's ``max_seq_len`` most recent events (the reader does
this for gemkd datasets, ``StudentArtifact.inputs`` for any batch; a serving client does it
when it builds the request): the program cannot learn a batch's longest history without a host
sync, so it trusts the cut.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.models import as_student_output

#: The program's inputs, in order (``seq_values`` one tensor per field of ``sequence``; the
#: code pair only for a student that reads codes).
INPUTS = ("dense", "categorical", "domain", "seq_offsets", "seq_values", "code_values",
          "code_offsets")


class ServingModel(nn.Module):
    """``student``: the rebuilt student; ``sequence``: the history fields it reads, in the
    order of ``seq_values``; ``codes``: the method that pools its codes
    (:class:`gemkd.adapters.methods.Repr`) or None."""

    def __init__(self, student: nn.Module, sequence: list[str], codes: nn.Module | None = None
                 ) -> None:
        super().__init__()
        self.student, self.sequence, self.codes = student, list(sequence), codes

    def forward(self, dense: Tensor, categorical: Tensor, domain: Tensor, seq_offsets: Tensor,
                seq_values: list[Tensor], code_values: Tensor | None = None,
                code_offsets: Tensor | None = None) -> Tensor:
        b = categorical.shape[0]
        none = torch.zeros(b, dtype=torch.long, device=categorical.device)
        batch = Batch(dense=dense, categorical=categorical,
                      seq_values=dict(zip(self.sequence, seq_values, strict=True)),
                      seq_offsets=seq_offsets, seq_max_len=0,  # cut already (module doc)
                      labels=dense.new_zeros(b, 0), domain=domain, example_id=none,
                      user_id=none, day=none, ts=none)
        if self.codes is None:
            out = self.student(batch)
        else:
            assert code_values is not None and code_offsets is not None
            pool = cast(Any, self.codes).pool_codes  # Repr.pool_codes (typed as a Module)
            features = pool(categorical, code_values, code_offsets)
            out = self.student(batch, features)
        return as_student_output(out).logits


def example_inputs(batch: Batch, sequence: list[str],
                   codes: tuple[Tensor, Tensor] | None) -> tuple[Any, ...]:
    """The program's positional inputs for ``batch`` (histories as the reader cut them) and
    its as-of codes ``(values, offsets)``, if the student reads codes."""
    args: tuple[Any, ...] = (batch.dense, batch.categorical, batch.domain, batch.seq_offsets,
                             [batch.seq_values[n] for n in sequence])
    return args if codes is None else (*args, *codes)


def export_program(model: ServingModel, args: tuple[Any, ...]) -> torch.export.ExportedProgram:
    """``torch.export`` of ``model`` with the batch size, history length and code count
    dynamic (``args``: an example with at least two of each, so none is specialised)."""
    batch = torch.export.Dim("batch", min=1, max=1 << 24)
    events = torch.export.Dim("events", min=0, max=1 << 30)
    dynamic: list[Any] = [{0: batch}, {0: batch}, {0: batch}, {0: batch + 1},
                          [{0: events} for _ in model.sequence]]
    if len(args) > 5:
        codes = torch.export.Dim("codes", min=0, max=1 << 30)
        dynamic += [{0: codes}, {0: batch + 1}]
    model.eval()
    with torch.no_grad():
        return torch.export.export(model, args, dynamic_shapes=tuple(dynamic), strict=False)

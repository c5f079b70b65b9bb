"""A student artifact: one folder a user takes to serving (DESIGN §6.3).

``gemkd student export`` writes it from a kept student of a run
(:mod:`gemkd.experiments.artifacts.student_export`); this module reads it back and predicts::

    artifact.json   written last (the commit marker): the variant, seed, lag and world it came
                    from, the run's metrics, the model's config (class_path + init_args), the
                    input contract, the tasks, domains and base rates, every file's sha256
    schema.json     the dataset's schema: features, id vocabularies (cardinalities), domains
    weights.pt      the serving model's state_dict (the weights the run evaluated)
    program.pt2     the ``torch.export`` program: tensors in, logits [B, n_tasks] out
    codes/          the LoopFM code table the student reads (kd_repr, full): a code store of
                    each user's latest codes before the first evaluation day and every code
                    since, so a lookup from that day on is the run's own
    vocab/          the id vocabularies of the columns the student reads (raw value → code,
                    the dataset's ``vocab/`` files; none for synthetic data): what
                    :func:`encode_raw` turns a serving request's raw ids into codes with

The as-of lookup (a user's ``max_events`` latest codes strictly before the impression) runs on
the host over ``codes/``; its values and offsets are program inputs (serving_model).
"""

from __future__ import annotations

import dataclasses
import json
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gemkd.experiments.artifacts.serving_model import ServingModel, example_inputs
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io.integrity import sha256_file
from gemkd.transfer.ops import keep_last

ARTIFACT_JSON = "artifact.json"
WEIGHTS = "weights.pt"
PROGRAM = "program.pt2"
SCHEMA = "schema.json"
CODES_DIR = "codes"
#: the layout this gemkd writes and reads
FORMAT_VERSION = 1


def student_sequence(student: nn.Module, schema: DatasetSchema) -> tuple[list[str], int | None]:
    """The history fields a student reads and the events it keeps (None: every event; a
    plug-in student that is not a StudentBase gets every field, uncut)."""
    from gemkd.students.student_base import StudentBase

    if isinstance(student, StudentBase):
        return list(student.sequence), student.max_seq_len
    return [f.name for f in schema.sequence], None


def build_serving(config: dict[str, Any], codes_method: dict[str, Any] | None,
                  schema: DatasetSchema, tasks: list[str], code_dim: int | None) -> ServingModel:
    """A serving model of fresh weights from the student's ``{class_path, init_args}`` and the
    codes method's (None: the student reads no codes); load a state_dict into it."""
    from gemkd.experiments.run.methods import method_class
    from gemkd.experiments.spec.sections import PluginSpec
    from gemkd.students import build_student
    from gemkd.transfer.plugins import instantiate

    student = build_student(config, schema, tasks)
    sequence, _ = student_sequence(student, schema)
    method = None
    if codes_method is not None:
        cls = method_class(PluginSpec(codes_method["class_path"]))
        method = instantiate(cls, "method", (), dict(codes_method["init_args"]))
        setup = getattr(method, "setup_serving", None)
        if setup is None or code_dim is None:
            raise ConfigError(f"method {codes_method['class_path']!r} feeds the student "
                              "features a student artifact cannot compute (only repr's codes)")
        setup(schema, code_dim)
    return ServingModel(student, sequence, method)


def program_inputs(batch: Batch, sequence: list[str], max_seq_len: int | None,
                   asof: Any = None) -> tuple[Any, ...]:
    """A serving program's inputs for ``batch``: its tensors, its histories (the fields of
    ``sequence``) cut to the ``max_seq_len`` most recent events (here, on the host, where a
    reader has not cut them already) and, with ``asof`` (an ``AsOfCodes``), each row's
    user's codes strictly before its time."""
    codes = None if asof is None else asof.lookup(batch.user_id, batch.ts)
    if max_seq_len is not None and batch.seq_max_len > max_seq_len:
        index, offsets, longest = keep_last(batch.seq_offsets, max_seq_len, batch.seq_max_len)
        assert index is not None  # something was cut
        batch = dataclasses.replace(
            batch, seq_offsets=offsets, seq_max_len=longest,
            seq_values={n: batch.seq_values[n].index_select(0, index) for n in sequence})
    return example_inputs(batch, sequence, codes)


class StudentArtifact:
    """A verified artifact folder: ``artifact.json`` agrees with every file it lists (a
    difference is a ConfigError naming the file)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta_path = self.path / ARTIFACT_JSON
        if not meta_path.is_file():
            raise ConfigError(f"{self.path}: no {ARTIFACT_JSON}: not a student artifact (or "
                              "its export did not finish)")
        try:
            self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        except ValueError as e:
            raise ConfigError(f"{meta_path}: not readable JSON ({e})") from None
        version = self.meta.get("format_version")
        if version != FORMAT_VERSION:
            raise ConfigError(f"{meta_path}: format_version {version!r}, this gemkd reads "
                              f"{FORMAT_VERSION}")
        for name, digest in self.meta["files"].items():
            f = self.path / name
            if not f.is_file():
                raise ConfigError(f"{f}: listed in {ARTIFACT_JSON} but missing")
            if sha256_file(f) != digest:
                raise ConfigError(f"{f}: sha256 does not match {ARTIFACT_JSON} (changed after "
                                  "export)")
        self.schema = DatasetSchema.load(self.path)
        self.tasks: list[str] = list(self.meta["tasks"])
        self.sequence: list[str] = list(self.meta["inputs"]["sequence"])
        self.max_seq_len: int | None = self.meta["inputs"]["max_seq_len"]
        self._vocab: dict[str, Any] = {}  # column → its vocabulary, read on first use

    @property
    def has_codes(self) -> bool:
        return self.meta.get("codes") is not None

    @cached_property
    def program(self) -> nn.Module:
        """The exported program as a callable module (``torch.export.load``)."""
        return torch.export.load(str(self.path / PROGRAM)).module()

    def model(self) -> ServingModel:
        """The serving model rebuilt from its config and ``weights.pt`` (an ``nn.Module`` to
        fine-tune or inspect; the program computes the same logits)."""
        codes = self.meta.get("codes")
        model = build_serving(self.meta["student"], codes and codes["method"], self.schema,
                              self.tasks, codes and codes["code_dim"])
        state = torch.load(self.path / WEIGHTS, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        return model.eval()

    @cached_property
    def asof(self) -> Any:
        """The as-of index over ``codes/`` (None: the student reads no codes)."""
        if not self.has_codes:
            return None
        from gemkd.transfer.repr_features import AsOfCodes, CodeStore

        return AsOfCodes(CodeStore(self.path / CODES_DIR),
                         max_events=int(self.meta["codes"]["max_events"]))

    def check_days(self, days: tuple[int, int]) -> None:
        """The code table answers as the run did from its first day on: earlier days are a
        ConfigError."""
        if self.has_codes and days[0] < int(self.meta["codes"]["from_day"]):
            raise ConfigError(f"{self.path}: its code table starts at day "
                              f"{self.meta['codes']['from_day']}; days from {days[0]} would "
                              "read users' codes it does not hold")

    def inputs(self, batch: Batch) -> tuple[Any, ...]:
        """The program's inputs for ``batch`` (:func:`program_inputs`)."""
        return program_inputs(batch, self.sequence, self.max_seq_len, self.asof)

    @torch.no_grad()
    def predict(self, batch: Batch) -> Tensor:
        """Serving logits ``[B, n_tasks]`` (columns in :attr:`tasks` order) by the program."""
        return self.program(*self.inputs(batch))

    def encode_raw(self, column: str, values: Any) -> np.ndarray:
        """The codes of raw ids of an input column (:func:`encode_raw`)."""
        from gemkd.transfer.data import vocabulary

        entries = self.meta["inputs"].get("vocabularies")
        if not entries:
            raise ConfigError(f"{self.path}: {self.meta['inputs'].get('vocabularies_note')}")
        if column not in self._vocab:
            self._vocab[column] = vocabulary.load_vocabulary(self.path, column, entries)
        return vocabulary.encode(self._vocab[column], values, column)


def encode_raw(artifact: str | Path | StudentArtifact, column: str, values: Any) -> np.ndarray:
    """Raw ids (as the log had them) → the codes the student reads, by the vocabulary the
    import kept for ``column``: what a serving request puts in the program's ``categorical``
    column ``column``, its ``domain`` or a history field (``hist_item``: item ids).

    An id the import never saw gets the code the import gives an unknown or missing value
    (0, the table's row for it; a domain value: ``other``); a hashed column hashes any id; a
    ``raw`` column's integer ids are their own codes; a ``log2`` column buckets a number.

    Parameters
    ----------
    artifact
        The artifact folder (``gemkd student export``), or one already opened.
    column
        An input column with a vocabulary: ``artifact.json``'s ``inputs.vocabularies``.
    values
        The raw values, one per row (a list, array or ``pandas.Series``); a column the import
        took the first item of (``split``) takes the whole list text.

    Returns
    -------
    numpy.ndarray
        int64 codes, one per value.

    Raises
    ------
    ConfigError
        No vocabulary for ``column`` (the error names those there are), or an artifact of a
        dataset without raw ids (synthetic data: its ids are codes already).
    DataError
        A vocabulary file that differs from its sha256.
    ValueError
        A ``raw`` column's value that is not a non-negative integer.
    """
    art = artifact if isinstance(artifact, StudentArtifact) else StudentArtifact(artifact)
    return art.encode_raw(column, values)

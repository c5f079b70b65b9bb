"""``gemkd student export``: a kept student of a run → a student artifact (DESIGN §6.3).

The artifact is built in a staging folder and renamed into place (``artifact.json`` last): a
folder at ``out`` is a finished export or nothing. Its layout:
:mod:`gemkd.experiments.artifacts.student_artifact`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gemkd.experiments.artifacts.serving_model import INPUTS, export_program
from gemkd.experiments.artifacts.student_artifact import (
    ARTIFACT_JSON,
    CODES_DIR,
    FORMAT_VERSION,
    PROGRAM,
    SCHEMA,
    WEIGHTS,
    build_serving,
    program_inputs,
    student_sequence,
)
from gemkd.experiments.run_dir import KeptStudent, RunDir
from gemkd.transfer.data.schema import SCHEMA_FILE, DatasetSchema
from gemkd.transfer.data.vocabulary import NO_VOCABULARIES
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io.integrity import sha256_file
from gemkd.transfer.io.publish import output_directory

#: rows of the evaluation days the program is traced on (histories and codes dynamic)
TRACE_ROWS = 64


def find_kept(run: RunDir, variant: str, seed: int | None = None, lag: float | None = None,
              world: int | None = None) -> KeptStudent:
    """The one kept student of ``variant`` matching the given seed, lag and world; none or
    several is a ConfigError listing what the run kept."""
    kept = run.kept_students()
    match = [k for k in kept if k.variant == variant and (seed is None or k.seed == seed)
             and (lag is None or k.lag == lag) and (world is None or k.world == world)]
    if len(match) == 1:
        return match[0]
    have = ", ".join(f"{k.variant} seed {k.seed} lag {k.lag} world {k.world}" for k in kept)
    if not match:
        raise ConfigError(f"{run.path}: no kept student of variant {variant!r}"
                          + (f" seed {seed}" if seed is not None else "")
                          + f"; the run kept: {have or 'none (spec keep_students: none?)'}")
    raise ConfigError(f"{run.path}: {len(match)} kept students of variant {variant!r} match; "
                      f"name one with --seed, --lag or --world ({have})")


def export_student(run_dir: str | Path, variant: str, out: str | Path, seed: int | None = None,
                   lag: float | None = None, world: int | None = None,
                   overwrite: bool = False) -> Path:
    """Write the artifact of ``variant``'s kept student of a run to ``out``, atomically
    (``gemkd student export``).

    Parameters
    ----------
    run_dir
        The run directory (``gemkd run``'s ``--out``) whose ``students/`` holds the student.
    variant
        The variant whose student to export.
    out
        The artifact folder to create.
    seed, lag, world
        Which kept student (None: the one the run kept; needed when it kept several).
    overwrite
        Replace an existing artifact at ``out``.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    ConfigError
        No such kept student (the error lists those kept), a student reading features an
        artifact cannot compute (SOLARIS pairs), or ``out`` taken without ``overwrite``.
    """
    run = RunDir(run_dir)
    kept = find_kept(run, variant, seed, lag, world)
    payload = run.read_student(kept)
    data = payload["data"]
    schema = DatasetSchema.load(data)
    tasks = list(payload["tasks"])
    features = list(payload["features"])
    if len(features) > 1:
        raise ConfigError(f"{kept.path}: {len(features)} methods feed the student features; "
                          "an artifact computes one (repr's codes)")
    codes_store = None
    codes_method = None
    if features:
        from gemkd.transfer.repr_features import CodeStore

        if payload["codes"] is None:
            raise ConfigError(f"{kept.path}: method {features[0]['class_path']!r} feeds the "
                              "student, and the run had no LoopFM codes: an artifact serves "
                              "only repr's codes")
        codes_store = CodeStore(payload["codes"])
        codes_method = {"class_path": features[0]["class_path"],
                        "init_args": dict(features[0]["init_args"])}
    model = build_serving(payload["student"], codes_method, schema, tasks,
                          None if codes_store is None else codes_store.code_dim)
    _load(model, payload, kept.path)
    sequence, max_seq_len = student_sequence(model.student, schema)
    eval_days = (int(payload["eval_days"][0]), int(payload["eval_days"][1]))
    with output_directory(Path(out), overwrite=overwrite, last=(ARTIFACT_JSON,)) as tmp:
        shutil.copyfile(Path(data) / SCHEMA_FILE, tmp / SCHEMA)
        torch.save(model.state_dict(), tmp / WEIGHTS)
        files = [SCHEMA, WEIGHTS, PROGRAM]
        vocabs = copy_vocabularies(data, schema, sequence, tmp)
        files += sorted({e["file"] for e in vocabs.values() if "file" in e})
        codes_meta = None
        if codes_store is not None:
            assert codes_method is not None
            _write_codes(codes_store, int(payload["max_events"]), eval_days[0], tmp / CODES_DIR)
            files += [f"{CODES_DIR}/codes.json", f"{CODES_DIR}/codes.parquet"]
            codes_meta = {"method": codes_method, "code_dim": codes_store.code_dim,
                          "bits": codes_store.bits, "max_events": int(payload["max_events"]),
                          "from_day": eval_days[0], "source": str(payload["codes"])}
        meta = _meta(payload, kept, run, schema, sequence, max_seq_len, codes_meta)
        meta["inputs"].update(vocabularies=vocabs or None, vocabularies_note=(
            "raw ids -> codes: gemkd.encode_raw(artifact, column, values)" if vocabs else
            f"the dataset {data} {NO_VOCABULARIES}: requests carry codes"))
        asof = None
        if codes_meta is not None:
            from gemkd.transfer.repr_features import AsOfCodes, CodeStore

            asof = AsOfCodes(CodeStore(tmp / CODES_DIR), max_events=int(payload["max_events"]))
        batch = _trace_batch(data, payload, sequence, max_seq_len, eval_days)
        args = program_inputs(batch, sequence, max_seq_len, asof)
        torch.export.save(export_program(model, args), str(tmp / PROGRAM))
        meta["files"] = {name: sha256_file(tmp / name) for name in files}
        (tmp / ARTIFACT_JSON).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return Path(out)


def copy_vocabularies(data: str | Path, schema: DatasetSchema, sequence: list[str], out: Path
                      ) -> dict[str, dict[str, Any]]:
    """Copy the id vocabularies of the columns the student reads (categorical, domain, the
    history fields of ``sequence``) from dataset ``data`` into ``out``, each checked against
    its sha256 on the way; their entries."""
    from gemkd.transfer.data.vocabulary import load_vocabulary

    read = {f.name for f in schema.categorical} | {"domain"} | set(sequence)
    chosen = {c: dict(e) for c, e in schema.vocabularies.items() if c in read}
    for column, e in chosen.items():
        if "file" in e:
            load_vocabulary(data, column, schema.vocabularies)  # its sha256, or a DataError
            (out / e["file"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(data) / e["file"], out / e["file"])
    return chosen


def _load(model: torch.nn.Module, payload: dict[str, Any], source: Path) -> None:
    """The kept weights into the serving model (``model.*`` the student's,
    ``methods.<i>.*`` the codes method's)."""
    state: dict[str, torch.Tensor] = {}
    index = payload["features"][0]["index"] if payload["features"] else None
    for key, value in payload["state_dict"].items():
        if key.startswith("model."):
            state["student." + key.removeprefix("model.")] = value
        elif index is not None and key.startswith(f"methods.{index}."):
            state["codes." + key.removeprefix(f"methods.{index}.")] = value
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ConfigError(f"{source}: its weights do not fit the student its config builds "
                          f"({' '.join(str(e).split())[:300]})") from None


def _write_codes(store: Any, max_events: int, first_day: int, out: Path) -> None:
    """The code table an artifact serves from ``first_day`` on (a code store)."""
    import pyarrow as pa

    from gemkd.transfer.repr_features import write_code_store
    from gemkd.transfer.repr_features.asof_scope import rows_from_day

    table = pa.concat_tables(list(rows_from_day(store, max_events, first_day)))
    col = table.column("code").combine_chunks()
    q = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=len(col) * store.nbytes,
                      offset=col.offset * store.nbytes).reshape(len(col), store.nbytes)
    write_code_store(out, table.column("example_id").to_numpy(),
                     table.column("user_id").to_numpy(), table.column("ts").to_numpy(),
                     table.column("day").to_numpy(), q, store.bits, store.code_dim,
                     {**store.meta, "artifact_from_day": first_day})


def _trace_batch(data: str, payload: dict[str, Any], sequence: list[str],
                 max_seq_len: int | None, days: tuple[int, int]) -> Any:
    """The evaluation days' first rows, read as the scorer reads them."""
    from gemkd.transfer.data.dataset_reader import DatasetReader

    domain = payload["student_domain"]
    reader = DatasetReader(data, days=days, batch_size=TRACE_ROWS, tasks=payload["tasks"],
                           oracle=False, domains=[domain] if domain else None,
                           sequence=sequence, max_seq_len=max_seq_len)
    batch = next(iter(reader), None)
    if batch is None or len(batch) < 2:
        raise ConfigError(f"{data}: the evaluation days {list(days)} hold fewer than 2 rows "
                          "of the student's domain: nothing to trace the program on")
    return batch


def _meta(payload: dict[str, Any], kept: KeptStudent, run: RunDir, schema: DatasetSchema,
          sequence: list[str], max_seq_len: int | None, codes: dict[str, Any] | None
          ) -> dict[str, Any]:
    """``artifact.json`` less its files' digests."""
    from gemkd.experiments.version import __version__

    metrics = {k: v for k, v in payload["metrics"].items()
               if k.split("/")[0] in ("ne", "auc", "calibration")}
    contract = {
        "order": [n for n in INPUTS if codes is not None or not n.startswith("code_")],
        "dense": {"dtype": "float32", "shape": ["B", len(schema.dense)],
                  "columns": list(schema.dense)},
        "categorical": {"dtype": "int64", "shape": ["B", len(schema.categorical)],
                        "columns": [f.name for f in schema.categorical],
                        "cardinality": [f.cardinality for f in schema.categorical]},
        "domain": {"dtype": "int64", "shape": ["B"], "values": list(schema.domains)},
        "seq_offsets": {"dtype": "int64", "shape": ["B+1"]},
        "seq_values": {"dtype": "int64", "shape": [["N"] for _ in sequence],
                       "fields": sequence},
        "sequence": sequence, "max_seq_len": max_seq_len,
        "histories": "oldest first, cut to each row's max_seq_len most recent events, "
                     "strictly before the impression",
    }
    if codes is not None:
        contract["code_values"] = {"dtype": "float32", "shape": ["M", codes["code_dim"]]}
        contract["code_offsets"] = {"dtype": "int64", "shape": ["B+1"],
                                    "what": f"each row's user's {codes['max_events']} latest "
                                            "codes strictly before its ts, oldest first"}
    return {
        "format_version": FORMAT_VERSION, "gemkd": __version__, "torch": torch.__version__,
        "run": str(run.path.resolve()), "variant": kept.variant, "seed": kept.seed,
        "lag": kept.lag, "world": kept.world, "params": payload["params"],
        "student": payload["student"], "tasks": list(payload["tasks"]),
        "domains": list(schema.domains), "student_domain": payload["student_domain"],
        "base_rates": payload["base_rates"], "train_days": payload["train_days"],
        "eval_days": payload["eval_days"], "ema_decay": payload["ema_decay"],
        "metrics": metrics, "inputs": contract, "codes": codes, "program": PROGRAM,
    }

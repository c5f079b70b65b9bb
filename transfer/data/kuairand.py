"""KuaiRand logs → the gemkd schema (DESIGN §2.4): the importer with the KuaiRand preset.

The preset (``experiments/data/mappings/kuairand.yaml``) declares the columns and reads KuaiRand's
CSV files or their Parquet copies (``datasets/kuairand_pure_slice``; one log in both formats is
an error, as for any import: it would be read twice); this module adds the rules a fixed mapping
cannot say: which tasks to write (``--tasks``; a default task whose feedback column is missing is
left out with a note, an explicitly requested one is an error); a log without ``tab`` has one
domain ``all``, one without ``date`` counts days from its first event's date; history feedback
levels use only the columns the log has; and the command-line domain share and history cap
override the preset's values.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gemkd.transfer.data.importer import ImportResult, import_logs, log_columns, source
from gemkd.transfer.data.importer.mapping import Mapping
from gemkd.transfer.data.importer.mapping_parse import check_mapping
from gemkd.transfer.errors import ConfigError, DataError

DEFAULT_TASKS = ("click", "long_view", "like")


def convert_kuairand(src: str | Path, out: str | Path, mapping: Mapping,
                     tasks: list[str] | None = None, min_domain_share: float = 0.01,
                     max_history: int = 1024, overwrite: bool = False) -> ImportResult:
    """Write KuaiRand log(s) as a gemkd dataset, through the importer and its shipped mapping.

    Parameters
    ----------
    src
        A directory of KuaiRand logs, or one log CSV.
    out
        The dataset directory.
    mapping
        The KuaiRand mapping (:func:`gemkd.transfer.data.importer.load_mapping`).
    tasks
        The feedback columns kept as tasks (None: the mapping's).
    min_domain_share
        Tabs with a smaller share of the rows are left out, in [0, 1).
    max_history
        The most recent events kept in each history.
    overwrite
        Replace a dataset already at ``out``.

    Returns
    -------
    ImportResult
        The schema written and notes on what was left out.

    Raises
    ------
    ConfigError
        A bad option.
    DataError
        Naming the file and column of a bad log.
    """
    m, notes = kuairand_mapping(Path(src), mapping, tasks, min_domain_share, max_history)
    return import_logs(src, m, out, overwrite=overwrite, notes=notes)


def kuairand_mapping(src: Path, mapping: Mapping, tasks: list[str] | None,
                     min_domain_share: float, max_history: int) -> tuple[Mapping, list[str]]:
    """The preset adapted to the logs at ``src`` and the options; and notes on what was left
    out."""
    if not 0 <= min_domain_share < 1:
        raise ConfigError(f"--min-domain-share must be in [0, 1), got {min_domain_share}")
    if max_history < 1:
        raise ConfigError(f"--max-history must be >= 1, got {max_history}")
    files = source.find_files(src, mapping.files, set())  # one log in two formats: an error
    headers = {f: set(source.header(f)) for f in files}

    def lacking(column: str) -> Path | None:
        return next((f for f, cols in headers.items() if column not in cols), None)

    notes: list[str] = []
    labels = {lab.name: lab for lab in mapping.labels}
    if tasks is not None:
        for t in tasks:
            if t not in labels:
                raise ConfigError(f"--tasks: unknown task {t!r}; KuaiRand tasks: "
                                  f"{', '.join(labels)}")
            if tasks.count(t) > 1:
                raise ConfigError(f"--tasks: task {t!r} given twice")
            if (f := lacking(labels[t].column)) is not None:
                raise DataError(f"{f}: column {labels[t].column!r} missing (needed by task "
                                f"{t!r} from --tasks)")
        chosen = list(tasks)
    else:
        chosen = []
        for t in DEFAULT_TASKS:
            if (f := lacking(labels[t].column)) is None:
                chosen.append(t)
            else:
                notes.append(f"task {t!r} left out: {f} has no column {labels[t].column!r}")
        if not chosen:
            raise DataError(f"{files[0]}: none of the default tasks' columns "
                            f"({', '.join(labels[t].column for t in DEFAULT_TASKS)}) is there")
    m = mapping.replace(labels=tuple(labels[t] for t in chosen))
    date = m.days.date_column
    if date is not None and (f := lacking(date)) is not None:
        notes.append(f"day 0 is the first calendar date of the event times: {f} has no "
                     f"column {date!r}")
        m = m.replace(days=dataclasses.replace(m.days, date_column=None))
    history = m.history
    domain = m.domain
    if domain is not None:
        if (f := lacking(domain.column)) is not None:
            notes.append(f"one domain 'all': {f} has no column {domain.column!r}")
            m = m.replace(domain=None)
            if history is not None:
                history = dataclasses.replace(history, fields=tuple(
                    f for f in history.fields if f.kind != "domain"))
        else:
            m = m.replace(domain=dataclasses.replace(domain, min_share=min_domain_share))
    if history is not None:
        fields = []
        for hf in history.fields:
            if hf.kind == "levels":
                present = tuple(tuple(c for c in lv if lacking(c) is None) for lv in hf.levels)
                gone = [c for lv in hf.levels for c in lv if lacking(c) is not None]
                if gone:
                    notes.append(f"history field {hf.name!r} without {', '.join(gone)} "
                                 "(not in the log)")
                hf = dataclasses.replace(hf, levels=present)
            fields.append(hf)
        m = m.replace(history=dataclasses.replace(history, fields=tuple(fields),
                                                  max_events=max_history))
    check_mapping(m)
    for col, key in log_columns(m).items():
        if (f := lacking(col)) is not None:
            raise DataError(f"{f}: column {col!r} missing (required by the KuaiRand mapping, "
                            f"key {key!r})")
    return m, notes

"""Reading logs and side tables (CSV or Parquet) into typed columns.

Every conversion is vectorised and every failure is one ``DataError`` naming the file, the column,
the place (``line N`` of a CSV, counting the header as line 1; ``row N`` of a Parquet file, from
0) and, where a mapping key asked for the column, that key.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from gemkd.transfer.data.importer.mapping import Label
from gemkd.transfer.errors import DataError

CSV_SUFFIXES = (".csv", ".csv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")


def is_csv(path: Path) -> bool:
    return path.name.lower().endswith(CSV_SUFFIXES)


_FIRST_ROW: ContextVar[int] = ContextVar("first_row", default=0)


@contextmanager
def rows_from(first: int) -> Iterator[None]:
    """Within this block, row ``i`` of the columns being checked is row ``first + i`` of its
    file (a batch of a file read in batches), so every error names the file's own row."""
    token = _FIRST_ROW.set(first)
    try:
        yield
    finally:
        _FIRST_ROW.reset(token)


def place(path: Path, i: int) -> str:
    """Where row ``i`` (0-based, in file order) is, in words a user can look up."""
    i += _FIRST_ROW.get()
    return f"line {i + 2}" if is_csv(path) else f"row {i}"


def _table_name(path: Path) -> tuple[Path, str]:
    """The folder and name of the table ``path`` holds: its name less a CSV or Parquet suffix
    (``a.csv``, ``a.csv.gz`` and ``a.parquet`` are one table ``a``)."""
    lower = path.name.lower()
    for suffix in (*CSV_SUFFIXES, *PARQUET_SUFFIXES):
        if lower.endswith(suffix):
            return path.parent, path.name[:-len(suffix)]
    return path.parent, path.name


def _one_copy(src: Path, files: list[Path], patterns: tuple[str, ...]) -> None:
    """One table in two formats (``a.csv`` and ``a.parquet``, as the default patterns both
    match) would be read twice, every row doubled."""
    seen: dict[tuple[Path, str], Path] = {}
    for f in files:
        first = seen.setdefault(_table_name(f), f)
        if first is not f:
            raise DataError(
                f"{src}: both {first.relative_to(src)} and {f.relative_to(src)} match the log "
                f"patterns ({', '.join(patterns)}): the same table in two formats, whose rows "
                "would be read twice; keep one, or give the mapping a files: pattern that "
                "matches only one (e.g. files: [\"*.parquet\"])")


def find_files(src: Path, patterns: tuple[str, ...], exclude: set[Path]) -> list[Path]:
    """``src`` itself, or the files of directory ``src`` matching ``patterns`` (name order); two
    of them holding one table (``a.csv`` and ``a.parquet``) are an error."""
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise DataError(f"{src}: no such file or directory")
    found = sorted({p for pat in patterns for p in src.glob(pat)
                    if p.is_file() and p.resolve() not in exclude})
    if not found:
        raise DataError(f"{src}: no log files (looked for {', '.join(patterns)})")
    _one_copy(src, found, patterns)
    return found


def _unreadable(path: Path, e: BaseException) -> DataError:
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    kind = "CSV" if is_csv(path) else "Parquet file"
    return DataError(f"{path}: not a readable {kind} ({first})")


def header(path: Path, names: tuple[str, ...] | None = None) -> list[str]:
    """The column names of a CSV or Parquet file (``names``: a CSV without a header line,
    whose columns these are)."""
    if not (is_csv(path) or path.name.lower().endswith(PARQUET_SUFFIXES)):
        raise DataError(f"{path}: unsupported file type (expected .csv, .csv.gz or .parquet)")
    if names is not None and is_csv(path):
        return list(names)
    try:
        if is_csv(path):
            return [str(c) for c in pd.read_csv(path, nrows=0).columns]
        return list(pq.read_schema(path).names)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty file (expected a header line)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pa.ArrowException) as e:
        raise _unreadable(path, e) from None


def first_row(path: Path) -> list[str]:
    """The first line's fields of a CSV (a header, or a first row of data)."""
    try:
        with pa.input_stream(str(path), compression="detect") as f:
            reader = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
            return next(reader, [])
    except (OSError, UnicodeDecodeError, csv.Error, pa.ArrowException):
        return []


def looks_like_data(fields: list[str]) -> bool:
    """Column names that look like a row of data: one or more is a number (a name seldom is),
    as a CSV without a header line gives."""
    def number(v: str) -> bool:
        try:
            float(v)
        except ValueError:
            return False
        return True

    return any(number(f.strip()) for f in fields if f.strip())


def check_fields(path: Path, names: tuple[str, ...] | None = None) -> None:
    """Every line of a CSV has as many fields as its header (or ``names``): a row with a field
    more or less is an error naming the line, as pandas without column selection and Arrow's
    reader give (pandas reading selected columns drops an extra field without a word). Arrow
    parses the file (fast); the line is found by Python's csv module once a row is bad."""
    cols = list(names) if names is not None else header(path)
    read = pacsv.ReadOptions(column_names=list(names) if names is not None else None,
                             use_threads=False, block_size=1 << 22)  # 4 MB at a time
    convert = pacsv.ConvertOptions(include_columns=cols[:1],  # parsed, not converted
                                   column_types={cols[0]: pa.string()})
    try:
        with pa.input_stream(str(path), compression="detect") as f:
            for _ in pacsv.open_csv(f, read_options=read, convert_options=convert,
                                    parse_options=pacsv.ParseOptions(newlines_in_values=True)):
                pass
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        if "Expected" not in str(e) or "columns, got" not in str(e):
            return  # not a field count: pandas' reader names whatever else is wrong
        raise _bad_row(path, names) from None


def _bad_row(path: Path, names: tuple[str, ...] | None) -> DataError:
    """The first line whose field count is not the header's."""
    with pa.input_stream(str(path), compression="detect") as f:
        reader = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
        want = len(names) if names is not None else len(next(reader, []))
        for row in reader:
            if row and len(row) != want:
                why = ("a field more: a stray delimiter, an unquoted comma in a value?"
                       if len(row) > want else "fields missing: a row cut short?")
                kind = "mapping's 'columns' name" if names is not None else "header has"
                return DataError(f"{path}: line {reader.line_num}: {len(row)} fields where the "
                                 f"{kind} {want} ({why}); fix or drop the row")
    return DataError(f"{path}: a row's field count is not the header's")


def read(path: Path, columns: list[str], names: tuple[str, ...] | None = None
         ) -> pd.DataFrame:
    """The named columns of a file (each must exist: check ``header`` first); ``names``: a
    CSV without a header line, whose columns these are."""
    try:
        if is_csv(path):
            return pd.read_csv(path, usecols=columns, low_memory=False, **_names(names))
        return pq.read_table(path, columns=columns).to_pandas()
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pa.ArrowException,
            ValueError) as e:
        raise _unreadable(path, e) from None


def _names(names: tuple[str, ...] | None) -> dict:
    return {} if names is None else {"header": None, "names": list(names)}


def batches(path: Path, columns: list[str], rows: int, row_groups: list[int] | None = None,
            names: tuple[str, ...] | None = None) -> Iterator[tuple[int, pd.DataFrame]]:
    """The named columns of a file, ``rows`` rows at a time, with each batch's first row: a
    CSV through pandas' chunked reader (the types ``read`` infers, per batch), a Parquet file
    a record batch at a time with column projection (only ``row_groups``, if given: rows are
    then counted from the first of them)."""
    try:
        if is_csv(path):
            first = 0
            with pd.read_csv(path, usecols=columns, low_memory=False, chunksize=rows,
                             **_names(names)) as chunks:
                for df in chunks:
                    yield first, df.reset_index(drop=True)
                    first += len(df)
            return
        first = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=rows, columns=columns,
                                                       row_groups=row_groups):
            df = batch.to_pandas()
            yield first, df
            first += len(df)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pa.ArrowException,
            ValueError) as e:
        raise _unreadable(path, e) from None


def show(v: object) -> str:
    """A cell value as a user wrote it: 0.5, 'x' (not np.float64(0.5))."""
    return repr(v.item() if isinstance(v, np.generic) else v)


def fail(path: Path, column: str, i: int, what: str, key: str) -> DataError:
    """The one-line error for row ``i`` of ``column``, naming the mapping key that read it."""
    by = f" (mapping key {key!r})" if key else ""
    return DataError(f"{path}: column {column!r} {place(path, i)}: {what}{by}")


def numbers(s: pd.Series, path: Path, key: str = "", integer: bool = False,
            missing_ok: bool = False, non_negative: bool = False) -> np.ndarray:
    """A numeric column as float64 (NaN where empty and ``missing_ok``) or int64 if ``integer``."""
    col = str(s.name)
    if pd.api.types.is_bool_dtype(s):
        s = s.astype(np.int64)
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(v) & s.notna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(path, col, i, f"{show(s.iloc[i])} is not a number", key)
    if not missing_ok and np.isnan(v).any():
        raise fail(path, col, int(np.argmax(np.isnan(v))), "empty value", key)
    if integer:
        frac = ~np.isnan(v) & (v % 1 != 0)
        if frac.any():
            i = int(np.argmax(frac))
            raise fail(path, col, i, f"{show(s.iloc[i])} is not an integer", key)
    if non_negative and (v < 0).any():
        i = int(np.argmax(v < 0))
        raise fail(path, col, i, f"negative id {s.iloc[i]}", key)
    if integer and not missing_ok:
        exact = pd.api.types.is_integer_dtype(s)
        return s.to_numpy(dtype=np.int64) if exact else v.astype(np.int64)
    return v


def binary(s: pd.Series, path: Path, key: str, hint: str = "") -> np.ndarray:
    """A 0/1 column as int8."""
    v = numbers(s, path, key)
    bad = (v != 0) & (v != 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(path, str(s.name), i, f"{show(s.iloc[i])} is not 0 or 1{hint}", key)
    return v.astype(np.int8)


def label(s: pd.Series, path: Path, lab: Label) -> np.ndarray:
    """A task label: the 0/1 column itself, or ``column <op> value``."""
    if lab.op is None:
        return binary(s, path, lab.key, "; add op and value to threshold it")
    ref = lab.value
    assert ref is not None  # parse_mapping: an op comes with its value
    if isinstance(ref, str):
        if s.isna().any():
            raise fail(path, lab.column, int(np.argmax(s.isna().to_numpy())), "empty value",
                       lab.key)
        v = s.astype(str).to_numpy()
    else:
        v = numbers(s, path, lab.key)
    ops = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less,
           "==": np.equal, "!=": np.not_equal}
    return ops[lab.op](v, ref).astype(np.int8)


def dates(s: pd.Series, path: Path, key: str) -> np.ndarray:
    """A date column (yyyymmdd integers or ISO dates) as days since 1970-01-01."""
    if pd.api.types.is_numeric_dtype(s):
        v = numbers(s, path, key, integer=True)
        parsed = pd.to_datetime(pd.Series(v).astype(str), format="%Y%m%d", errors="coerce")
    else:
        parsed = pd.to_datetime(s.astype("string"), format="ISO8601", errors="coerce")
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(path, str(s.name), i, f"{show(s.iloc[i])} is not a date (yyyymmdd or ISO)",
                    key)
    if parsed.dt.tz is not None:
        parsed = parsed.dt.tz_localize(None)
    return parsed.to_numpy().astype("datetime64[D]").astype(np.int64)

"""Where data lives: a local path or an object-store URI (``s3://bucket/key``), behind pyarrow's
filesystems. One small vocabulary for both, so a reader or writer takes either.

A location is a ``Path`` (local) or a ``str`` URI (remote); helpers keep that form, so local
paths and their messages stay exactly what they were. S3 is configured by the standard variables:
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``; e.g. ``http://127.0.0.1:9000`` for MinIO),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` and ``AWS_REGION`` /
``AWS_DEFAULT_REGION``.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from gemkd.transfer.errors import GemkdError

Where = str | Path
SCHEMES = ("s3",)
_CHUNK = 1 << 22


def is_remote(where: Any) -> bool:
    return isinstance(where, str) and where.split("://", 1)[0] in SCHEMES and "://" in where


def as_where(where: Any) -> Where:
    """A URI of a supported object store stays a ``str``; anything else is a local ``Path``."""
    if isinstance(where, str) and "://" in where:
        scheme = where.split("://", 1)[0]
        if scheme == "file":
            return Path(where[len("file://"):])
        if scheme not in SCHEMES:
            raise GemkdError(f"{where}: unsupported scheme {scheme}:// (local paths and "
                             f"{', '.join(s + '://' for s in SCHEMES)} are)")
        return where.rstrip("/")
    return Path(where)


def absolute(where: Any) -> str:
    """A stable name of the location (for cache keys): the URI, or the resolved local path."""
    where = as_where(where)
    return where if isinstance(where, str) else str(where.resolve())


def join(where: Any, *parts: str) -> Where:
    where = as_where(where)
    if isinstance(where, str):
        return "/".join([where, *(p.strip("/") for p in parts)])
    return where.joinpath(*parts)


def name(where: Any) -> str:
    where = as_where(where)
    return where.rsplit("/", 1)[-1] if isinstance(where, str) else where.name


def parent(where: Any) -> Where:
    where = as_where(where)
    return where.rsplit("/", 1)[0] if isinstance(where, str) else where.parent


@functools.lru_cache(maxsize=8)
def _s3(endpoint: str | None, region: str | None, key: str | None, secret: str | None,
        token: str | None) -> pafs.S3FileSystem:
    kwargs: dict[str, Any] = {}
    if endpoint:
        scheme, sep, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host if sep else endpoint,
                      scheme=scheme if sep else "https")
    if region:
        kwargs["region"] = region
    if key and secret:
        kwargs.update(access_key=key, secret_key=secret, session_token=token)
    return pafs.S3FileSystem(**kwargs)


def resolve(where: Any) -> tuple[pafs.FileSystem, str]:
    """``(pyarrow filesystem, path inside it)`` for a local path or an ``s3://`` URI."""
    where = as_where(where)
    if isinstance(where, Path):
        return pafs.LocalFileSystem(), str(where.absolute())
    env = os.environ.get
    fs = _s3(env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL"),
             env("AWS_REGION") or env("AWS_DEFAULT_REGION"), env("AWS_ACCESS_KEY_ID"),
             env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN"))
    return fs, where.split("://", 1)[1]


def _info(where: Any) -> pafs.FileInfo:
    fs, path = resolve(where)
    try:
        return fs.get_file_info(path)
    except (OSError, pa.ArrowException) as e:
        raise GemkdError(f"{where}: cannot reach it ({_first_line(e)})") from None


def is_file(where: Any) -> bool:
    return _info(where).type == pafs.FileType.File


def is_dir(where: Any) -> bool:
    return _info(where).type == pafs.FileType.Directory


def exists(where: Any) -> bool:
    return _info(where).type != pafs.FileType.NotFound


def size(where: Any) -> int:
    return _info(where).size or 0


def read_bytes(where: Any) -> bytes:
    where = as_where(where)
    if isinstance(where, Path):
        return where.read_bytes()
    fs, path = resolve(where)
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except (OSError, pa.ArrowException) as e:
        raise GemkdError(f"{where}: unreadable ({_first_line(e)})") from None


def write_bytes(where: Any, data: bytes) -> None:
    """Readers never see a torn file: locally a temporary name and a rename; on an object store
    one PUT, which readers see whole or not at all."""
    where = as_where(where)
    if isinstance(where, Path):
        from gemkd.transfer.io.atomic import atomic_write_bytes

        atomic_write_bytes(where, data)
        return
    fs, path = resolve(where)
    with fs.open_output_stream(path) as f:
        f.write(data)


def open_input(where: Any) -> Any:
    """What pyarrow's readers take: the local path as ``str``, or an open remote file."""
    where = as_where(where)
    if isinstance(where, Path):
        return str(where)
    fs, path = resolve(where)
    return fs.open_input_file(path)


def list_names(where: Any) -> list[str]:
    """Names of the entries directly under ``where`` (empty if it is missing)."""
    fs, path = resolve(where)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos)


def list_files(where: Any) -> list[str]:
    """Paths, relative to ``where``, of every file under it."""
    fs, path = resolve(where)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path):].lstrip("/") for i in infos if i.type == pafs.FileType.File)


def remove(where: Any) -> None:
    fs, path = resolve(where)
    if _info(where).type == pafs.FileType.File:
        fs.delete_file(path)


def sha256(where: Any) -> str:
    where = as_where(where)
    h = hashlib.sha256()
    if isinstance(where, Path):
        with open(where, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    fs, path = resolve(where)
    with fs.open_input_stream(path) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def upload(local: Path, where: Any) -> None:
    """Copy the local file ``local`` to ``where``."""
    fs, path = resolve(where)
    pafs.copy_files(str(local), path, destination_filesystem=fs)


def download(where: Any, local: Path) -> None:
    fs, path = resolve(where)
    local.parent.mkdir(parents=True, exist_ok=True)
    pafs.copy_files(path, str(local), source_filesystem=fs)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__

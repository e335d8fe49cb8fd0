"""The run folder on the Airflow side: a local path or any ``ObjectStoragePath`` URI.

A run's files — the manifest, each variant's collected outputs and audit, the reports, the run record — live
below ``runs_uri``: a plain path, ``file://``, or a URI Airflow's object storage reads (``s3://``, ``gs://``,
``memory://``, … with its fsspec backend and, for a remote store, a connection). Only Airflow touches it: the
replay jobs get the manifest in their submission and send their results over Kafka.

Strings are kept as given (``str(Path("memory://a"))`` would drop a slash); :func:`location` turns one into
the object to open: a :class:`pathlib.Path` for local paths and ``file://``, an ``ObjectStoragePath`` else
(fsspec's own path, ``UPath``, for a scheme no Airflow provider registers, such as ``memory://``).
"""

from __future__ import annotations

import hashlib
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from airflow_flink_replay.core.local_files import replacing

__all__ = ["digest", "exists", "is_uri", "join", "location", "open_text", "parent", "write_text"]

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_uri(value: str) -> bool:
    """Whether ``value`` names a scheme (``file://`` included)."""
    return bool(_SCHEME.match(value))


def location(value: str) -> Any:
    """``value`` as an object to open: a local :class:`Path` (plain path or ``file://``), else an
    ``ObjectStoragePath``."""
    if not is_uri(value) or value.startswith("file://"):
        return Path(value.removeprefix("file://"))
    from airflow.sdk import ObjectStoragePath

    path = ObjectStoragePath(value)
    try:
        path.fs  # noqa: B018 - resolves the scheme's filesystem (and its connection)
    except ValueError:  # a scheme no Airflow provider registers (memory://): fsspec's own filesystem
        from upath import UPath

        return UPath(value)
    return path


def join(base: str, *parts: str) -> str:
    """``base/part/…`` as a string, the scheme of ``base`` kept."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def parent(value: str) -> str:
    """The folder ``value`` is in, as a string of the same kind."""
    head, _, _tail = value.rstrip("/").rpartition("/")
    return head


def exists(value: str) -> bool:
    """Whether the file or folder exists."""
    return bool(location(value).exists())


def open_text(value: str, mode: str = "r") -> AbstractContextManager[IO[str]]:
    """Open ``value`` as UTF-8 text (use it in a ``with``); writing creates its folder. A local file opened with
    ``w`` is written beside its name and renamed over it when the block ends
    (:func:`~airflow_flink_replay.core.local_files.replacing`): a symlink planted at the name is replaced, never
    written through."""
    target = location(value)
    if "w" in mode or "a" in mode:
        target.parent.mkdir(parents=True, exist_ok=True)
    if mode == "w" and isinstance(target, Path):
        return replacing(target)
    return target.open(mode, encoding="utf-8")


def write_text(value: str, text: str) -> None:
    """Write ``text`` to ``value`` (its folder created)."""
    with open_text(value, "w") as fh:
        fh.write(text)


def digest(value: str) -> str | None:
    """SHA-256 of the file at ``value`` (a local folder: of its files), None when it does not exist."""
    target = location(value)
    if isinstance(target, Path):  # a local file or folder: the run record's own digest
        from airflow_flink_replay.core.run_record import file_digest

        return file_digest(target)
    if not target.exists() or target.is_dir():
        return None
    h = hashlib.sha256()
    with target.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

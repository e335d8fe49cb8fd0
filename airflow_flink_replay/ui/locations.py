"""Which files the UI plugin may read: those under a runs location the deployment allows.

The URIs the plugin serves come from XCom (the comparison's report URIs, the ``resolve`` task's run folder), and
XCom is written by task code: a DAG's author could push any URI, ``file:///etc/...`` or another bucket. So the API
server reads a file only when it lies under one of the prefixes Airflow's own config names,
``[flink_replay] runs_locations`` (comma-separated; unset or empty: nothing is served). The specs' ``runs_uri`` are
not used for this: they live in DAG files and reach the API server only through task-written XCom, the very thing
the check bounds.

A URI is refused (:class:`~airflow_flink_replay.exceptions.RunFileRefusedError`) when it

- is relative, holds a NUL, or has a ``..`` or ``.`` segment (after percent-decoding, for ``file://``): no writer of
  this package produces one, and it would step out of a prefix;
- has another scheme, or another bucket or connection (``s3://conn@bucket``), than every location;
- is local (a path or ``file://``) and its real path (every symlink resolved, ``os.path.realpath``) is not under a
  location's real path: a symlink planted in a run folder does not lead outside;
- is an object-store URI whose path is not the location's path or below it (a whole segment: ``s3://b/runs`` does
  not allow ``s3://b/runs-other``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from airflow_flink_replay.exceptions import RunFileRefusedError
from airflow_flink_replay.run_io import run_storage

log = logging.getLogger(__name__)

#: Airflow's config section and option that name the allowed runs locations.
SECTION = "flink_replay"
OPTION = "runs_locations"
_FIX = f"Fix: add the runs folder's location to Airflow's [{SECTION}] {OPTION} (comma-separated URI prefixes)"


@dataclass(frozen=True)
class RunsLocation:
    """One allowed prefix: ``scheme`` (``file`` for a local folder), ``netloc`` (an object store's bucket, with the
    connection if the URI names one; empty for a local folder) and ``path`` (without a trailing slash; a local
    folder's as written, resolved at each check since the folder may itself be a symlink)."""

    scheme: str
    netloc: str
    path: str

    def __str__(self) -> str:
        return self.path if self.scheme == "file" else f"{self.scheme}://{_host(self.netloc)}{self.path}"


def _host(netloc: str) -> str:
    """``netloc`` without user info (what a page or a log may show)."""
    return netloc.rpartition("@")[2]


def shown(uri: str) -> str:
    """``uri`` without its user info, for messages and logs."""
    if not run_storage.is_uri(uri):
        return uri
    parts = urlsplit(uri)
    return parts._replace(netloc=_host(parts.netloc)).geturl()


def _split(uri: str) -> tuple[str, str, str]:
    """``(scheme, netloc, path)`` of a URI or a local path, refused when it cannot be judged safely."""
    if "\x00" in uri:
        raise RunFileRefusedError(f"refused: the location holds a NUL character. {_FIX}")
    if run_storage.is_uri(uri):
        parts = urlsplit(uri)
        scheme, netloc, path = parts.scheme.lower(), parts.netloc, parts.path
        if scheme == "file":
            if netloc not in ("", "localhost"):
                raise RunFileRefusedError(f"refused: {shown(uri)} names another host. {_FIX}")
            netloc, path = "", unquote(path)
    else:
        scheme, netloc, path = "file", "", uri
    if scheme == "file" and not os.path.isabs(path):
        raise RunFileRefusedError(f"refused: {shown(uri)} is a relative path. {_FIX}")
    if any(segment in ("..", ".") for segment in path.split("/")):
        raise RunFileRefusedError(
            f"refused: {shown(uri)} has a '..' or '.' segment. Fix: the task that recorded it must record the "
            "file's location without them"
        )
    stripped = path.rstrip("/")
    return scheme, netloc, "/" if scheme == "file" and not stripped else stripped


def parse_locations(value: str) -> list[RunsLocation]:
    """The locations a ``runs_locations`` value names (comma-separated URIs or absolute paths). An entry that is
    relative or has a ``..`` segment is skipped with a warning: it allows nothing."""
    found = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        try:
            found.append(RunsLocation(*_split(entry)))
        except RunFileRefusedError as err:
            log.warning("[%s] %s: entry %s ignored (%s)", SECTION, OPTION, shown(entry), err)
    return found


def configured_locations() -> list[RunsLocation]:
    """The runs locations Airflow's config allows (``[flink_replay] runs_locations``); none when unset."""
    from airflow.configuration import conf

    return parse_locations(conf.get(SECTION, OPTION, fallback="") or "")


def _within(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or below it, by whole segments."""
    return base in ("", "/") or path == base or path.startswith(base + "/")


def contained(uri: str, locations: list[RunsLocation]) -> str:
    """What to open for ``uri`` when it is under one of ``locations``: a local file's real path (symlinks
    resolved), or the object-store URI as given. Raises :class:`RunFileRefusedError` otherwise."""
    if not locations:
        raise RunFileRefusedError(f"refused: no runs location is allowed on this API server. {_FIX}")
    scheme, netloc, path = _split(uri)
    if scheme == "file":
        real = os.path.realpath(path)
        for location in locations:
            if location.scheme == "file" and _within(real, os.path.realpath(location.path)):
                return real
        raise RunFileRefusedError(
            f"refused: {shown(uri)} is not under an allowed runs location once its symlinks are resolved. {_FIX}"
        )
    for location in locations:
        if (location.scheme, location.netloc) == (scheme, netloc) and _within(path, location.path):
            return uri
    raise RunFileRefusedError(f"refused: {shown(uri)} is not under an allowed runs location. {_FIX}")

"""Read and write replay manifests through URIs (``file://``, ``s3://``, plain paths, …).

Strings go through fsspec (installed on both sides; remote schemes need their fsspec backend, e.g.
``s3fs``). Anything with an ``open(mode)`` method — Airflow's ``ObjectStoragePath``, ``upath.UPath``,
``pathlib.Path`` — is used as is, so Airflow tasks can pass an ObjectStoragePath carrying a connection.
No airflow import here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
from pathlib import Path
from typing import Any, Protocol

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.exceptions import ManifestError

log = logging.getLogger(__name__)

#: The hosts a ``file:`` URL may name: none, or ``localhost`` (read from the path, like none).
_LOCAL_HOSTS = ("", "localhost")


class _Openable(Protocol):
    def open(self, mode: str = ..., *args: Any, **kwargs: Any) -> Any: ...


Target = str | os.PathLike[str] | _Openable


def _open(target: Target, mode: str) -> Any:
    if isinstance(target, Path):
        if "w" in mode:
            target.parent.mkdir(parents=True, exist_ok=True)
        return target.open(mode, encoding="utf-8")
    if isinstance(target, str | os.PathLike):
        import fsspec

        return fsspec.open(os.fspath(target), mode, encoding="utf-8", auto_mkdir="w" in mode).open()
    if "w" in mode and hasattr(target, "parent"):
        with contextlib.suppress(OSError, NotImplementedError):  # object stores have no directories
            target.parent.mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
    return target.open(mode)


def save_manifest(
    manifest: ReplayManifest, target: Target, *, signing_key: str | bytes | None = None
) -> ReplayManifest:
    """Seal ``manifest`` (if it is not) and write it to ``target``; return the sealed manifest.

    With ``signing_key`` it is also signed (HMAC-SHA256, see :meth:`ReplayManifest.signed`).
    """
    if signing_key is not None:
        sealed = manifest.signed(signing_key)
    else:
        sealed = manifest if manifest.digest == manifest.compute_digest() else manifest.sealed()
    with _open(target, "w") as fh:
        fh.write(sealed.to_json(indent=2))
        fh.write("\n")
    return sealed


def load_manifest(source: Target, *, verify: bool = True, signing_key: str | bytes | None = None) -> ReplayManifest:
    """Read a manifest; with ``verify`` (the default) a digest mismatch raises ManifestTamperedError.

    With ``signing_key`` the signature must be present and match too (else ManifestTamperedError): a
    digest recomputed by hand after an edit does not get past it. Without a key, unsigned and signed
    manifests alike load on their digest.
    """
    try:
        with _open(source, "r") as fh:
            text = fh.read()
    except FileNotFoundError as err:
        raise ManifestError(
            [
                f"(file) {os.fspath(source) if isinstance(source, str | os.PathLike) else source}: "
                "not found. Fix: check the URI the manifest step returned"
            ]
        ) from err
    manifest = ReplayManifest.parse(text, verify=verify)
    if signing_key is not None:
        manifest.verify_signature(signing_key)
        if not manifest.signature_covers_isolation:
            log.warning(
                "manifest %s was signed before the signature covered its isolation section: that section is "
                "checked by the digest only (re-create the manifest to have it signed)",
                os.fspath(source) if isinstance(source, str | os.PathLike) else source,
            )
    return manifest


def _comparable(location: str) -> tuple[str, str, str]:
    """(scheme, host, normalised absolute path) of a URI or plain path, as it is read; local ones compare as
    ``file`` with symlinks resolved. Only for locations :func:`_location_problem` has nothing against."""
    from urllib.parse import urlparse

    local = local_path(location)
    if local is not None:
        return "file", "", os.path.realpath(local)
    parsed = urlparse(location)
    return parsed.scheme.lower(), parsed.netloc.lower(), posixpath.normpath("/" + parsed.path.lstrip("/"))


def _location_problem(location: str) -> str | None:
    """Why ``location`` could be read from elsewhere than a check of its text says (None: it cannot).

    fsspec reads ``file://host/p`` as ``<cwd>/host/p``, does not decode ``%xx``, takes ``?``/``#`` as part of a
    local name and chains URLs at ``::``: each of those is refused rather than interpreted.
    """
    from urllib.parse import urlparse

    parsed = urlparse(location)
    if parsed.scheme.lower() == "file" and parsed.netloc.lower() not in _LOCAL_HOSTS:
        return (
            f"names host {parsed.netloc!r}: a file URL is read from this machine, and that host part would make "
            "it read a folder under the working directory. Fix: give file:///<absolute path> (no host)"
        )
    if any(ord(c) < 32 or c in "\\\x7f" for c in location):
        return "holds control characters or backslashes. Fix: give the URI as run_record.json names it"
    checks = (
        ("::" in location, "chains URLs ('::'). Fix: give the manifest's own URI"),
        ("%" in location, "is percent-encoded ('%'), and would be read without decoding. Fix: give it unencoded"),
        ("?" in location or "#" in location, "carries '?' or '#'. Fix: give the manifest's URI without them"),
        (".." in location.split("/"), "has a '..' segment. Fix: give the path without '..'"),
    )
    return next((problem for refused, problem in checks if refused), None)


def is_within(location: str, prefix: str) -> bool:
    """True when ``location`` lies under ``prefix``: same scheme and host, whole path segments (``/runs`` does
    not hold ``/runs-evil``), local paths with symlinks resolved. A location or prefix :func:`_location_problem`
    refuses lies within nothing."""
    if _location_problem(location) or _location_problem(prefix):
        return False
    loc, base = _comparable(location), _comparable(prefix)
    if loc[:2] != base[:2]:
        return False
    root = base[2].rstrip("/") or "/"
    return loc[2] == root or loc[2].startswith(root if root.endswith("/") else root + "/")


def manifest_source_problems(location: str, allowed: list[str] | tuple[str, ...]) -> list[str]:
    """Why an earlier manifest may not be loaded from ``location`` ([] when it lies under one of ``allowed``).

    A manifest decides which savepoint and which input a replay restores; one fetched from anywhere (an
    ``http://`` URL, another team's folder, a file URL whose host makes fsspec read under the working
    directory) would let whoever controls that place choose them.
    """
    problem = _location_problem(location)
    if problem:
        return [f"existing_manifest {location!r} {problem}"]
    if any(is_within(location, prefix) for prefix in allowed):
        return []
    return [
        f"existing_manifest {location} lies outside manifest_sources {list(allowed)}: an earlier manifest is "
        "only loaded from the runs location (or the places manifest_sources lists). Fix: give the manifest of "
        "a run under runs_uri, or add its location to the spec's manifest_sources"
    ]


def checked_manifest_source(location: str, allowed: list[str] | tuple[str, ...]) -> str:
    """The location to read an earlier manifest from, once :func:`manifest_source_problems` has nothing against
    it: exactly the place that was checked (a local file as its absolute, symlink-resolved path; another scheme
    as ``scheme://host/<normalised path>``), so what is read is what was checked.

    :raises ManifestError: naming ``existing_manifest`` and the fix.
    """
    problems = manifest_source_problems(location, allowed)
    if problems:
        raise ManifestError(problems, title="refused existing_manifest")
    scheme, host, path = _comparable(location)
    return path if scheme == "file" else f"{scheme}://{host}{path}"


def local_path(location: str) -> str | None:
    """The local path of a ``file:`` URI (Flink writes ``file:/x``, others ``file:///x``) or a plain path;
    None for other schemes."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(location)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return location if not parsed.scheme else None


def normalized_location(location: str) -> str:
    """``file:///a/b/``, ``file:/a/b`` and ``/a/b`` alike → ``/a/b`` (for comparing savepoint locations);
    other schemes are kept as they are, without a trailing slash."""
    return re.sub(r"^file:/+", "/", location).rstrip("/")


def savepoint_problems(manifest: ReplayManifest) -> list[str]:
    """Check that the linked savepoint still exists (its ``_metadata`` file), where that can be checked.

    Only ``file://`` and plain paths are checked here; other schemes are reported as not checked.
    """
    local = local_path(manifest.production.savepoint.path)
    if local is None:
        return []
    metadata = Path(local) / "_metadata"
    if not metadata.exists():
        return [
            f"production.savepoint.path: missing savepoint — {metadata} does not exist. Fix: the savepoint "
            "was moved or deleted; take a new one (quiesce step) and re-create the manifest"
        ]
    return []


def record_isolation(target: Target, *, signing_key: str | bytes | None = None, **changes: Any) -> ReplayManifest:
    """Fill in the isolation section of a stored manifest (verified first, re-sealed, written back).

    ``changes`` are :class:`~airflow_flink_replay.core.manifest.Isolation` fields, e.g.
    ``production_action_state_topic=…, action_state_topics={variant: topic}`` or
    ``production_memory_namespace=…, memory_namespaces={variant: namespace}``; mappings are merged with
    what the manifest already holds, so each step adds its part.

    The signature covers the isolation section: with ``signing_key`` the manifest's signature is verified
    first (an edit since it was written is refused, never signed over) and the manifest is signed again. A
    signed manifest is refused without the key (:class:`ManifestError`), unless its signature predates that
    coverage and stays valid.
    """
    manifest = load_manifest(target, signing_key=signing_key)
    if signing_key is None and manifest.signature_covers_isolation:
        raise ManifestError(
            [
                f"(file) {os.fspath(target) if isinstance(target, str | os.PathLike) else target}: the manifest is "
                "signed and its signature covers the isolation section, so recording it needs the signing key. "
                "Fix: give the step that records it the signing connection (IsolateActionStateOperator's "
                "signing_conn_id: the spec's manifest_signing_conn_id)"
            ],
            title="cannot record the isolation in a signed manifest without the key",
        )
    current = manifest.isolation.model_dump()
    merged = {
        key: ({**current.get(key, {}), **value} if isinstance(value, dict) else value) for key, value in changes.items()
    }
    updated = manifest.with_isolation(**merged)
    return save_manifest(updated, target, signing_key=signing_key)

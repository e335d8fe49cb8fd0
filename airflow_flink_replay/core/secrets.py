"""Secrets travel by reference: ``${env:NAME}`` or ``${file:/path}``, resolved on the job side.

Everything the Airflow side hands a replay job — the :class:`~airflow_flink_replay.core.replay_job_spec.
ReplayJobSpec` in ``--spec-json``, XCom, the run record — is visible to anyone who can read Flink's
JobManager log, its REST API (``/jobs/{id}/config`` shows program arguments) or Airflow's XCom. So a
secret in a config the job needs (a vector store's ``api_key`` in the Mem0 config, say) is written as a
reference, and only the job side, inside Flink, replaces it with the value — from an environment variable
of the Flink processes or a file mounted there (a Kubernetes secret volume). A literal value under a
secret-looking key is refused where the config enters (``ReplaySpec``, ``ReplayJobSpec``), naming the
field and the fix; messages never carry the value.

A secret takes more shapes than ``api_key: sk-…``: a name in any case style (``accessToken``,
``X-Api-Key``, ``PGPASSWORD``), a number or a list under such a name, an ``Authorization: Bearer …`` value,
the password of a URL (``postgresql://user:pw@db``) or of a connection string (``…;Password=pw``, ``?token=``),
a ``--password pw`` pair of program arguments. :func:`literal_secrets` finds them all, walking iteratively
(each distinct container once: a YAML alias bomb is a dozen lists, not 9**11 paths) and refusing nesting
deeper than :data:`MAX_DEPTH`.

Where a value was resolved and handed to other code (mem0 builds its config with pydantic, whose errors
echo their input), :func:`call_scrubbed` re-raises an error that shows a value as
:class:`~airflow_flink_replay.exceptions.SecretScrubbedError`, each value replaced by its reference.

Pure: no Airflow, no PyFlink — both sides import it.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from airflow_flink_replay.exceptions import SecretReferenceError, SecretScrubbedError

T = TypeVar("T")

#: ``${env:NAME}`` / ``${file:/absolute/path}`` — the whole string, nothing around it.
REFERENCE = re.compile(r"^\$\{(?P<kind>env|file):(?P<target>[^}]+)\}\Z")
#: Largest secret file read for a ``${file:…}`` reference (a key, a password, a PEM: a few KB).
MAX_FILE_BYTES = 64 * 1024
#: Deepest nesting the secret walk follows (a config nests a handful of levels).
MAX_DEPTH = 64
_FIX = (
    "Fix: write a reference resolved inside Flink instead — '${env:NAME}' (an environment variable of the Flink "
    "JobManager and TaskManagers) or '${file:/path}' (a file mounted there, e.g. a Kubernetes secret); a URL or "
    "a header gets its whole value as one reference"
)
_SECRET_NAMES = frozenset({"api_key", "apikey", "access_key", "private_key", "secret_key", "aws_secret_access_key"})
#: Last word of a secret's name (``client_secret``, ``X-Auth-Token``, ``MYSQL_PWD``).
_SECRET_WORDS = frozenset({
    "password", "passwords", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "token", "credentials",
    "credential", "auth", "authorization", "apikey",
})  # fmt: skip
#: Last two words of a secret's name (``OPENAI_API_KEY``, ``s3.secret-key``).
_SECRET_PAIRS = frozenset({("api", "key"), ("secret", "key"), ("private", "key"), ("access", "key"),
                           ("signing", "key")})  # fmt: skip
#: Endings of a name written without separators (``PGPASSWORD``, ``xapikey``).
_COMPACT_ENDINGS = ("password", "passwd", "passphrase", "apikey", "secretkey", "privatekey", "accesstoken", "authtoken")
_HEADER_VALUE = re.compile(r"^\s*(?:[A-Za-z][\w-]*\s*:\s*)?(?:bearer|basic|token)\s+\S{8,}\s*$", re.IGNORECASE)
_HEADER_LINE = re.compile(r"^\s*(?P<name>[A-Za-z][\w-]*)\s*:\s*(?P<value>\S.*?)\s*$")
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@?#]*:(?P<value>[^/\s@?#]+)@")
_PAIR = re.compile(r"(?:^|[;&?,\s])-{0,2}(?P<name>[A-Za-z][\w.-]*)\s*=\s*(?P<value>[^;&,\s]+)")
_FLAG = re.compile(r"^-{1,2}(?P<name>[A-Za-z][\w.-]*)\Z")


def _words(key: str) -> list[str]:
    """``key`` split into lower-case words: camelCase, ``-``, ``_``, ``.`` and spaces all separate."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def is_secret_key(key: str) -> bool:
    """True for names that hold secrets in any case style (``api_key``, ``accessToken``, ``X-Api-Key``,
    ``PGPASSWORD``, ``pwd``, ``auth``) — not ``max_tokens``, ``tokenizer`` or ``private_key_path``."""
    words = _words(key)
    if not words:
        return False
    return (
        "_".join(words) in _SECRET_NAMES
        or words[-1] in _SECRET_WORDS
        or tuple(words[-2:]) in _SECRET_PAIRS
        or "".join(words).endswith(_COMPACT_ENDINGS)
    )


def is_reference(value: Any) -> bool:
    """True for ``${env:NAME}`` / ``${file:/path}``."""
    return isinstance(value, str) and REFERENCE.match(value) is not None


def _names_reference(value: str) -> bool:
    """Whether ``value`` holds a reference (whole or in part: ``Bearer ${env:TOKEN}``) rather than a value."""
    return "${env:" in value or "${file:" in value


def embedded_secret(value: str) -> bool:
    """True when ``value`` carries a literal credential whatever its key: an ``Authorization`` header value
    (``Bearer``/``Basic``/``Token …``), a URL's password (``scheme://user:pw@host``), a secret-named pair of a
    connection string, query or argument (``Password=pw``, ``?token=t``, ``--api-key=k``) or header line."""
    if _HEADER_VALUE.match(value) and not _names_reference(value):
        return True
    if any(not _names_reference(m["value"]) for m in _URL_PASSWORD.finditer(value)):
        return True
    if any(is_secret_key(m["name"]) and not _names_reference(m["value"]) for m in _PAIR.finditer(value)):
        return True
    line = _HEADER_LINE.match(value)
    return bool(line and "://" not in value and is_secret_key(line["name"]) and not _names_reference(line["value"]))


def url_has_credentials(value: str) -> bool:
    """True for a URI with a password in it (``s3://key:secret@bucket``; ``s3://conn_id@bucket`` is not)."""
    return _URL_PASSWORD.search(value) is not None


def _literal_under_secret_name(value: Any) -> bool:
    """A scalar under a secret name is a literal secret unless empty, a flag, None or a reference."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, bytes):
        return bool(value.strip())
    if isinstance(value, str):
        return bool(value.strip()) and not _names_reference(value)
    return True


def _parsed_json(value: str) -> Any:
    """``value`` parsed when it is a JSON object or array (``--mem0-config '{...}'``), else None."""
    if not value.lstrip().startswith(("{", "[")):
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict | list) else None


def _is_secret_flag(value: Any) -> bool:
    """``--password`` / ``-api-key``: a program argument whose next argument is a secret."""
    match = _FLAG.match(value) if isinstance(value, str) else None
    return bool(match and is_secret_key(match["name"]))


def _children(node: Any, here: str, secret: bool, opaque: Collection[str]) -> list[tuple[str, Any, bool]] | None:
    """``(path, value, under a secret name)`` of a container's items; None for a scalar. A model's field names
    are the schema's, never secret names; the keys of the mappings at ``opaque`` paths are resource names."""

    def at(key: Any) -> str:
        return f"{here}.{key}" if here else str(key)

    if isinstance(node, BaseModel):
        return [(at(name), getattr(node, name, None), secret) for name in type(node).model_fields]
    if isinstance(node, Mapping):
        names = here not in opaque
        return [(at(k), v, secret or (names and is_secret_key(str(k)))) for k, v in node.items()]
    if isinstance(node, list | tuple | set | frozenset):
        items = list(node)
        return [(f"{here}[{i}]", v, secret or (i > 0 and _is_secret_flag(items[i - 1]))) for i, v in enumerate(items)]
    return None


def _relative_file_reference(value: Any) -> bool:
    match = REFERENCE.match(value) if isinstance(value, str) else None
    return bool(match and match["kind"] == "file" and not Path(match["target"].strip()).is_absolute())


def _scan(tree: Any, path: str, opaque: Collection[str]) -> tuple[list[str], list[str]]:
    """``(paths of literal secrets, paths of relative ${file:…} references)`` in ``tree``, in document order.

    Iterative, each distinct container visited once per secret context (a YAML alias bomb is a few shared
    lists); deeper than :data:`MAX_DEPTH` raises :class:`SecretReferenceError` naming where.
    """
    literal: list[str] = []
    relative: list[str] = []
    seen: set[tuple[int, bool]] = set()
    stack: list[tuple[str, Any, bool, int]] = [(path, tree, False, 0)]
    while stack:
        here, node, secret, depth = stack.pop()
        if depth > MAX_DEPTH:
            shown = here if len(here) <= 120 else f"{here[:120]}…"
            raise SecretReferenceError(
                f"{shown}: nested deeper than {MAX_DEPTH} levels, where the check for literal secrets stops. "
                "Fix: flatten the config"
            )
        parsed = _parsed_json(node) if isinstance(node, str) else None
        children = _children(parsed if parsed is not None else node, here, secret, opaque)
        if children is None:
            if _relative_file_reference(node):
                relative.append(here)
            elif (secret and _literal_under_secret_name(node)) or (isinstance(node, str) and embedded_secret(node)):
                literal.append(here)
            continue
        if parsed is None:
            if (id(node), secret) in seen:
                continue
            seen.add((id(node), secret))
        stack.extend((p, v, s, depth + 1) for p, v, s in reversed(children))
    return literal, relative


def literal_secrets(tree: Any, path: str = "", *, opaque: Collection[str] = ()) -> list[str]:
    """Dotted paths of literal secrets in ``tree`` (see the module docstring for the shapes), in document order.

    ``tree`` may be a pydantic model (its fields are walked; their names are the schema's). The keys of the
    mappings at the ``opaque`` paths are not taken as names (resource names with a decision each)."""
    return _scan(tree, path, opaque)[0]


def refuse_literal_secrets(tree: Any, field: str, *, opaque: Collection[str] = ()) -> None:
    """Raise :class:`SecretReferenceError` naming every literal secret and every relative ``${file:…}`` reference
    in ``tree`` (values never shown)."""
    paths, relative = _scan(tree, field, opaque)
    problems = []
    if paths:
        problems.append(
            f"{', '.join(paths)} hold{'s' if len(paths) == 1 else ''} a secret as a literal value (under a secret "
            "name, or a header, URL or connection-string credential): it would be copied into XCom, the run record "
            f"and the replay job's program arguments, which Flink's JobManager log and REST API show. {_FIX}"
        )
    if relative:
        problems.append(
            f"{', '.join(relative)}: a '${{file:…}}' reference with a relative path (which folder it means depends "
            "on the process). Fix: give the absolute path of the file on the Flink hosts"
        )
    if problems:
        raise SecretReferenceError("; ".join(problems))


def refuse_credentials_in_locations(locations: Mapping[str, str | None]) -> None:
    """Raise :class:`SecretReferenceError` naming each location (``runs_uri``, …) that holds ``user:password@``:
    the value would be copied into XCom and the replay jobs' arguments."""
    bad = [field for field, value in locations.items() if value and url_has_credentials(value)]
    if bad:
        raise SecretReferenceError(
            f"{', '.join(bad)} hold{'s' if len(bad) == 1 else ''} credentials (user:password@) in the URI: it is "
            "copied into XCom, the run record and the replay jobs' arguments. Fix: drop them from the URI and let a "
            "connection carry them — name an Airflow connection in the URI (s3://<conn_id>@bucket/path) or "
            "configure the filesystem (its environment or config file); a value the replay jobs need goes by "
            "reference ('${env:NAME}' or '${file:/path}')"
        )


# ------------------------------------------------------------------------------------------ resolution
def resolve_references(tree: Any, env: Mapping[str, str] | None = None, path: str = "") -> Any:
    """A copy of ``tree`` with every reference replaced by its value (job side only).

    :raises SecretReferenceError: a variable is unset, a file is not absolute, unreadable, not a regular file,
        larger than :data:`MAX_FILE_BYTES` or not UTF-8, or ``tree`` nests deeper than :data:`MAX_DEPTH`
        (naming the field and the reference, never a value).
    """
    return _resolve(tree, os.environ if env is None else env, path, 0)


def _resolve(tree: Any, env: Mapping[str, str], path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise SecretReferenceError(f"{path[:120]}: nested deeper than {MAX_DEPTH} levels. Fix: flatten the config")
    if isinstance(tree, Mapping):
        return {k: _resolve(v, env, f"{path}.{k}" if path else str(k), depth + 1) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_resolve(v, env, f"{path}[{i}]", depth + 1) for i, v in enumerate(tree)]
    if not is_reference(tree):
        return tree
    return _resolve_one(tree, env, path or "value")


def _resolve_one(reference: str, env: Mapping[str, str], where: str) -> str:
    match = REFERENCE.match(reference)
    assert match is not None
    kind, target = match["kind"], match["target"].strip()
    if kind == "env":
        if target not in env:
            raise SecretReferenceError(
                f"{where}: {reference} is not set in this Flink process's environment. Fix: export {target} "
                "for the Flink JobManager and TaskManagers (env.java.opts / containerized.*.env / the pod spec)"
            )
        return env[target]
    return _read_secret_file(Path(target), reference, where)


def _read_secret_file(file: Path, reference: str, where: str) -> str:
    """The text of a secret file, stripped: absolute, a regular file, at most :data:`MAX_FILE_BYTES`, UTF-8."""
    if not file.is_absolute():
        raise SecretReferenceError(
            f"{where}: {reference} is a relative path (which folder it means depends on the process). Fix: give "
            "the absolute path of the file on the Flink hosts"
        )
    try:
        regular = stat.S_ISREG(file.stat().st_mode)  # a FIFO would block, a device never end
        if regular:
            with file.open("rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise SecretReferenceError(
            f"{where}: {reference} cannot be read on this Flink host ({type(err).__name__}). Fix: mount the "
            "file at that path on the JobManager and every TaskManager, readable by Flink's user"
        ) from None
    if not regular:
        raise SecretReferenceError(
            f"{where}: {reference} is not a regular file. Fix: point it at the file holding the secret"
        )
    if len(data) > MAX_FILE_BYTES:
        raise SecretReferenceError(
            f"{where}: {reference} is larger than {MAX_FILE_BYTES // 1024} KiB. Fix: point it at a file that holds "
            "only the secret"
        )
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretReferenceError(f"{where}: {reference} is not UTF-8 text. Fix: store the secret as text") from None


# ------------------------------------------------------------------------------------------- scrubbing
def _references(tree: Any) -> Iterator[str]:
    """Every reference in ``tree`` (iterative, each container once)."""
    seen: set[int] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if is_reference(node):
            yield node
        elif isinstance(node, Mapping | list | tuple) and id(node) not in seen:
            seen.add(id(node))
            stack.extend(node.values() if isinstance(node, Mapping) else node)


def resolved_values(tree: Any, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{value: reference}`` for every reference in ``tree`` that resolves (the others are skipped: their own
    error says why), empty values left out."""
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    for reference in _references(tree):
        try:
            value = _resolve_one(reference, env, "value")
        except SecretReferenceError:
            continue
        if value:
            values.setdefault(value, reference)
    return values


def _scrub_shortened(text: str, value: str, reference: str) -> str:
    """``text`` without the ends of ``value`` shown around an ellipsis (pydantic and ``reprlib`` shorten a long
    input in the middle: ``'sk-live-01...89abcdef'``), down to 6 characters."""
    for marker in ("...", "…"):
        for size in range(len(value) - 1, 5, -1):
            text = text.replace(value[:size] + marker, reference + marker)
            text = text.replace(marker + value[-size:], marker + reference)
    return text


def _replace(text: str, form: str, reference: str) -> str:
    """``text`` with ``form`` replaced by ``reference``; a short form (a port, a PIN) only where it stands alone,
    not inside a longer word or number."""
    if len(form) >= 8:
        return text.replace(form, reference)
    return re.sub(rf"(?<![A-Za-z0-9]){re.escape(form)}(?![A-Za-z0-9])", lambda _: reference, text)


def scrub(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each value of ``values`` (``{value: reference}``), in its plain, ``repr`` and JSON escaped
    forms, and the ends of a value shown shortened around an ellipsis, replaced by its reference."""
    for value in sorted(values, key=len, reverse=True):
        for form in {value, repr(value)[1:-1], json.dumps(value)[1:-1]}:
            text = _replace(text, form, values[value])
        text = _scrub_shortened(text, value, values[value])
    return text


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the errors it was raised from or during (as a traceback prints them)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _shown(err: BaseException) -> list[str]:
    """What a traceback or a log shows of ``err``'s chain besides code: each error's type and message, its
    ``repr`` and its notes."""
    lines = []
    for e in _chain(err):
        try:
            lines += [f"{type(e).__name__}: {e}", repr(e), *(str(note) for note in getattr(e, "__notes__", ()))]
        except Exception:  # an error whose text cannot be built shows none
            lines.append(f"{type(e).__name__}: <unprintable>")
    return lines


def scrubbed_error(err: BaseException, values: Mapping[str, str]) -> SecretScrubbedError | None:
    """A :class:`SecretScrubbedError` carrying ``err``'s text (and its chain's) scrubbed of ``values``; None when
    nothing ``err`` shows (messages, reprs, notes of its chain) holds a value."""
    shown = _shown(err)
    if not values or all(scrub(line, values) == line for line in shown):
        return None
    lines = [f"{type(e).__name__}: {_message(e)}" for e in _chain(err)]
    lines += [str(note) for e in _chain(err) for note in getattr(e, "__notes__", ())]
    return SecretScrubbedError(
        scrub("\n  from ".join(lines), values) + "\n(values resolved from references are shown as their references)"
    )


def _message(err: BaseException) -> str:
    try:
        return str(err)
    except Exception:  # as _shown
        return "<unprintable>"


def call_scrubbed(references: Any, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``; an error whose text shows a value a reference of ``references`` resolves to is
    re-raised as :class:`SecretScrubbedError` with every such value replaced by its reference, from None and
    outside the handler, so the original (and its traceback's frames, which hold the values) is dropped."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # re-raised as is unless it shows a resolved value
        replacement = scrubbed_error(err, resolved_values(references))
        if replacement is None:
            raise
    raise replacement from None

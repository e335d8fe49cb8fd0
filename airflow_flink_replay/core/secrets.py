"""Secrets travel by reference: ``${env:NAME}`` or ``${file:/path}``, resolved on the job side.

Everything the Airflow side hands a replay job — the :class:`~airflow_flink_replay.core.replay_job_spec.
ReplayJobSpec` in ``--spec-json``, XCom, the run record — is visible to anyone who can read Flink's
JobManager log, its REST API (``/jobs/{id}/config`` shows program arguments) or Airflow's XCom. So a
secret in a config the job needs (a vector store's ``api_key`` in the Mem0 config, say) is written as a
reference, and only the job side, inside Flink, replaces it with the value — from an environment variable
of the Flink processes or a file mounted there (a Kubernetes secret volume). A literal value under a
secret-looking key is refused where the config enters (``ReplaySpec``, ``ReplayJobSpec``), naming the
field and the fix; messages never carry the value.

Pure: no Airflow, no PyFlink — both sides import it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_flink_replay.exceptions import SecretReferenceError

#: ``${env:NAME}`` / ``${file:/absolute/path}`` — the whole string, nothing around it.
REFERENCE = re.compile(r"^\$\{(?P<kind>env|file):(?P<target>[^}]+)\}$")
_SECRET_NAMES = frozenset({
    "api_key", "apikey", "password", "passwd", "secret", "secret_key", "token", "access_token",
    "auth_token", "bearer_token", "private_key", "access_key", "credentials", "client_secret",
    "sasl_password", "ssl_key_password", "aws_secret_access_key",
})  # fmt: skip
_SECRET_SUFFIXES = ("_api_key", "_apikey", "_password", "_secret", "_token", "_private_key", "_secret_key")


def is_secret_key(key: str) -> bool:
    """True for config keys that hold secrets (``api_key``, ``password``, ``x_token`` — not ``max_tokens``)."""
    name = key.lower().replace("-", "_").replace(".", "_")
    return name in _SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)


def is_reference(value: Any) -> bool:
    """True for ``${env:NAME}`` / ``${file:/path}``."""
    return isinstance(value, str) and REFERENCE.match(value) is not None


def literal_secrets(tree: Any, path: str = "") -> list[str]:
    """Dotted paths of secret-looking keys that hold a literal value (not a reference, not empty)."""
    found: list[str] = []
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            here = f"{path}.{key}" if path else str(key)
            if is_secret_key(str(key)) and isinstance(value, str | bytes) and value and not is_reference(value):
                found.append(here)
            else:
                found.extend(literal_secrets(value, here))
    elif isinstance(tree, list | tuple):
        for i, value in enumerate(tree):
            found.extend(literal_secrets(value, f"{path}[{i}]"))
    return found


def refuse_literal_secrets(tree: Any, field: str) -> None:
    """Raise :class:`SecretReferenceError` naming every literal secret in ``tree`` (values never shown)."""
    paths = literal_secrets(tree, field)
    if paths:
        raise SecretReferenceError(
            f"{', '.join(paths)} hold{'s' if len(paths) == 1 else ''} a secret as a literal value: it would be "
            "copied into XCom, the run record and the replay job's program arguments, which Flink's JobManager "
            "log and REST API show. Fix: write a reference resolved inside Flink instead — '${env:NAME}' (an "
            "environment variable of the Flink JobManager and TaskManagers) or '${file:/path}' (a file mounted "
            "there, e.g. a Kubernetes secret)"
        )


def resolve_references(tree: Any, env: Mapping[str, str] | None = None, path: str = "") -> Any:
    """A copy of ``tree`` with every reference replaced by its value (job side only).

    :raises SecretReferenceError: a variable is unset or a file unreadable (naming the field and the
        reference, never a value).
    """
    env = os.environ if env is None else env
    if isinstance(tree, Mapping):
        return {k: resolve_references(v, env, f"{path}.{k}" if path else str(k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [resolve_references(v, env, f"{path}[{i}]") for i, v in enumerate(tree)]
    if not is_reference(tree):
        return tree
    match = REFERENCE.match(tree)
    assert match is not None
    kind, target = match["kind"], match["target"].strip()
    if kind == "env":
        if target not in env:
            raise SecretReferenceError(
                f"{path or 'value'}: {tree} is not set in this Flink process's environment. Fix: export {target} "
                "for the Flink JobManager and TaskManagers (env.java.opts / containerized.*.env / the pod spec)"
            )
        return env[target]
    try:
        return Path(target).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise SecretReferenceError(
            f"{path or 'value'}: {tree} cannot be read on this Flink host ({type(err).__name__}). Fix: mount the "
            "file at that path on the JobManager and every TaskManager, readable by Flink's user"
        ) from None

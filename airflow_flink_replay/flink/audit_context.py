"""Which agent key the current action runs for, so that audit records can name it.

Flink Agents resources never see the key. The runtime, however, calls
``flink_agents.runtime.flink_runner_context.flink_runner_context_switch_action_context(ctx, key)`` (by name,
through pemja) before it runs each action — with an int *hash* of the key, not the key: 0.2.0's
``PythonActionTask`` passes ``key.hashCode()`` of the operator's current key, which PyFlink's ``key_by`` makes a
one-field ``Row``, so the hash is that of the key's Flink value + 62 (the value: the key pickled for the
default ``key_type``, a Java ``String`` / ``Long`` / ``Integer`` for ``"string"`` / ``"long"`` / ``"int"``;
:func:`~airflow_flink_replay.core.audit.typed_key_hashes`). It also calls
``python_java_utils.wrap_to_input_event(bytes)`` for every input record, with the input pickled. Importing this
module wraps both: the input wrapper computes each input's key the way the job does — the job definition's
``key_selector`` (shipped, pickled, in the marker below), or the ``key_field`` of a mapping / attribute
(``FieldKey``, the factory form's JSON field) — learns its text
(:func:`~airflow_flink_replay.core.audit.key_text_of`, the text the capture topic's record keys have too) and
maps the key's hashes for every key type to it; the context switch then sets the current key text (or the
hash as text when it is unknown). :func:`current_key` returns it.

Both the learnt names and the current key are per thread, i.e. per task: every job on a TaskManager shares this
interpreter, and a shared name table would make one job's audit depend on which keys OTHER jobs happened to
feed it first. The way keys are learnt is per thread too (the task thread loads its job's plan), with the
last loaded plan's as the fallback. Actions restored in flight from a savepoint (``quiesce_mode=savepoint``)
may run before their key's next input reached the task, and then their key is the hash as text — in one
variant and not in another, as timing goes; the comparison names such hashes after the fact
(:func:`~airflow_flink_replay.core.audit.name_hashed_keys`) and a replay's cassette matches them
(:class:`~airflow_flink_replay.core.cassette.Cassette`).

The replay job (and production, when it records a cassette) makes the TaskManager import this module while
it deserialises the agent plan — before the first action runs — by putting a :class:`KeyHookMarker` into the
config of the plan's actions (Flink Agents imports the module of every pydantic value in an action config
when it loads the plan).

Proxies read :func:`current_key` when the framework *looks up* the guarded method (``chat_model.chat``,
``tool.call``), which happens synchronously in the action, so the key is right even for calls the framework
then runs on its async thread pool.
"""

from __future__ import annotations

import base64
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from airflow_flink_replay.core.audit import java_string_hash, key_hashes, key_text_of, typed_key_hashes
from airflow_flink_replay.flink import unmediated

__all__ = ["MARKER_CONFIG_KEY", "KeyHookMarker", "current_key", "install", "java_string_hash", "key_text",
           "learn_input_key", "learn_key", "marker_entry", "set_current_key"]

_log = logging.getLogger(__name__)
#: ``key_source``: how the last loaded plan learns keys (the fallback of a thread that loaded none).
_state: dict[str, Any] = {"installed": False, "key_source": None}

#: Per thread (= per task, see the module docstring): the current key, the key names learnt by this task and
#: how this task's plan learns keys.
_local = threading.local()

#: Action-config entry name carrying the marker.
MARKER_CONFIG_KEY = "_afr_audit_key_hook"


class KeyHookMarker(BaseModel):
    """Pydantic value put into action configs: loading it imports (and so installs) this module, and tells the
    task how to learn each input's key: ``key_selector`` (the job definition's, cloudpickled, base64) or
    ``key_field``."""

    installed: bool = True
    key_field: str = ""
    key_selector: str = ""

    def model_post_init(self, context: Any) -> None:
        """Remember how this task learns keys (the plan carries it to the TaskManager)."""
        selector = _unpickled_selector(self.key_selector) if self.key_selector else None
        _local.key_source = (self.key_field, selector) if selector is not None or self.key_field else None
        if _local.key_source is not None:
            _state["key_source"] = _local.key_source


def marker_entry(key_field: str = "", key_selector: Callable[[Any], Any] | None = None) -> list[Any]:
    """The action-config value of the marker: the serialised form Flink Agents gives a pydantic config value,
    ``[module, class, data]`` — a plain list (a model instance trips pydantic's circular-reference check in
    0.2.0's config serializer), built without instantiating the marker here (that would load the selector)."""
    pickled = ""
    if key_selector is not None:
        import cloudpickle

        pickled = base64.b64encode(cloudpickle.dumps(key_selector)).decode("ascii")
    data = {"installed": True, "key_field": key_field, "key_selector": pickled}
    return [KeyHookMarker.__module__, KeyHookMarker.__name__, data]


@functools.lru_cache(maxsize=16)
def _unpickled_selector(pickled: str) -> Callable[[Any], Any] | None:
    try:
        import cloudpickle

        return cloudpickle.loads(base64.b64decode(pickled))  # type: ignore[no-any-return]
    except Exception as exc:  # the audit names hashes then; never break the agent for an audit nicety
        _log.warning("airflow-flink-replay: cannot load the job's key selector for audit keys (%s)", exc)
        return None


def _names() -> dict[int, str]:
    names = getattr(_local, "names", None)
    if names is None:
        names = _local.names = {}
    return names


def learn_key(text: str, hashes: Iterable[int] | None = None) -> None:
    """Map ``hashes`` (by default the hashes the runtime may pass for the text key ``text``) back to ``text``
    (on this thread)."""
    names = _names()
    if len(names) > 200_000:
        names.clear()
    for candidate in key_hashes(text) if hashes is None else hashes:
        names[candidate] = text


def learn_input_key(value: Any) -> None:
    """Learn the key of the input ``value`` (the agent's input object) the way this task's plan says."""
    source = _key_source()
    if source is None:
        return
    key_field, selector = source
    if selector is not None:
        key = selector(value)
        hashes = typed_key_hashes(key, _pickled(key))
    else:  # a field, typed (FieldKey) or as text (FieldKey(as_text=True), the factory form): both hash forms
        if isinstance(value, str | bytes):
            import json

            value = json.loads(value)
        key = value[key_field] if isinstance(value, Mapping) else getattr(value, key_field)
        hashes = typed_key_hashes(key, _pickled(key)) + typed_key_hashes(str(key))
    learn_key(key_text_of(key), hashes)


def _key_source() -> tuple[str, Callable[[Any], Any] | None] | None:
    """This task's way to learn keys: its own plan's (None: its plan learns none), else the last loaded plan's."""
    return getattr(_local, "key_source", _state["key_source"])  # type: ignore[no-any-return]


def _pickled(key: Any) -> bytes | None:
    """The key as PyFlink pickles a ``PICKLED_BYTE_ARRAY`` key (cloudpickle)."""
    try:
        import cloudpickle

        return bytes(cloudpickle.dumps(key))
    except Exception:
        return None


def key_text(key: Any) -> str:
    """The key text for what the runtime passed (a hash), or the value as text when unknown."""
    if isinstance(key, int):
        return _names().get(key, str(key))
    return "" if key is None else str(key)


#: The current key is per thread: every job on a TaskManager shares this interpreter, and each task runs its
#: actions on its own thread — a global would let production's context switches relabel a replay's calls.


def current_key() -> str:
    """The key of the action running now on this thread ('' before its first action)."""
    return str(getattr(_local, "key", ""))


def set_current_key(key: Any) -> None:
    """Set the current key of this thread (tests and the wrapped runtime function)."""
    _local.key = "" if key is None else str(key)


def install() -> bool:
    """Wrap the runtime's per-action context switch (idempotent). False when flink_agents is absent."""
    if _state["installed"]:
        return True
    try:
        from flink_agents.runtime import flink_runner_context as frc
    except Exception:  # flink_agents not installed (Airflow side) or not importable here
        return False
    original = frc.flink_runner_context_switch_action_context
    if __name__ in getattr(original, "_afr_wrapped_by", ()):
        _state["installed"] = True
        return True

    def flink_runner_context_switch_action_context(ctx: Any, key: Any) -> None:
        set_current_key(key_text(key))
        unmediated.arm(ctx)  # this thread's next action: a replay's (guarded) or another job's (not)
        original(ctx, key)

    # Several copies of this module may live in one interpreter (one per runtime build, see agent_build): each
    # wraps the function once, chaining to the previous wrapper.
    flink_runner_context_switch_action_context._afr_wrapped_by = (  # type: ignore[attr-defined]
        *getattr(original, "_afr_wrapped_by", ()),
        __name__,
    )
    frc.flink_runner_context_switch_action_context = flink_runner_context_switch_action_context
    _wrap_input_event()
    unmediated.install()
    _state["installed"] = True
    _log.info("airflow-flink-replay: audit key hook installed")
    return True


def _wrap_input_event() -> None:
    try:
        from flink_agents.runtime import python_java_utils as pju
    except Exception:
        return
    original = pju.wrap_to_input_event
    if __name__ in getattr(original, "_afr_wrapped_by", ()):
        return

    def wrap_to_input_event(bytes_object: bytes) -> Any:
        if _key_source() is not None:
            try:
                import cloudpickle

                learn_input_key(cloudpickle.loads(bytes_object))
            except Exception:  # never break the agent for an audit nicety
                pass
        return original(bytes_object)

    wrap_to_input_event._afr_wrapped_by = (*getattr(original, "_afr_wrapped_by", ()), __name__)  # type: ignore[attr-defined]
    pju.wrap_to_input_event = wrap_to_input_event


install()

"""Which agent key the current action runs for, so that audit records can name it.

Flink Agents resources never see the key. The runtime, however, calls
``flink_agents.runtime.flink_runner_context.flink_runner_context_switch_action_context(ctx, key)`` (by name,
through pemja) before it runs each action — with an int *hash* of the key, not the key. It also calls
``python_java_utils.wrap_to_input_event(bytes)`` for every input record. Importing this module wraps both:
the input wrapper learns the key text of each input (from the ``key_field`` of the JSON input) and maps the
key hashes the Java side may pass (Java ``String.hashCode`` of the text, and that value + 31 / + 62 as the
0.2.0 operator passes for a one-field key row) to the text; the context switch then sets the current key
text (or the hash as text when it is unknown). :func:`current_key` returns it.

Both the learnt names and the current key are per thread, i.e. per task: every job on a TaskManager shares this
interpreter, and a shared name table would make one job's audit depend on which keys OTHER jobs happened to
feed it first. Actions restored in flight from a savepoint (``quiesce_mode=savepoint``) may run before their key's
next input reached the task, and then their key is the hash as text — in one variant and not in another, as
timing goes; the comparison names such hashes after the fact
(:func:`~airflow_flink_replay.core.audit.name_hashed_keys`).

The replay job makes the TaskManager import this module while it deserialises the agent plan — before the
first action runs — by putting a :class:`KeyHookMarker` into the config of the plan's actions (Flink Agents
imports the module of every pydantic value in an action config when it loads the plan).

Proxies read :func:`current_key` when the framework *looks up* the guarded method (``chat_model.chat``,
``tool.call``), which happens synchronously in the action, so the key is right even for calls the framework
then runs on its async thread pool.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pydantic import BaseModel

from airflow_flink_replay.core.audit import java_string_hash, key_hashes
from airflow_flink_replay.flink import unmediated

__all__ = ["MARKER_CONFIG_KEY", "KeyHookMarker", "current_key", "install", "java_string_hash", "key_text", "learn_key",
           "set_current_key"]

_log = logging.getLogger(__name__)
_state: dict[str, Any] = {"installed": False, "key_field": ""}

#: Per thread (= per task, see the module docstring): the current key and the key names learnt by this task.
_local = threading.local()

#: Action-config entry name carrying the marker.
MARKER_CONFIG_KEY = "_afr_audit_key_hook"


class KeyHookMarker(BaseModel):
    """Pydantic value put into action configs: loading it imports (and so installs) this module."""

    installed: bool = True
    key_field: str = ""

    def model_post_init(self, context: Any) -> None:
        """Remember which input field is the key (the plan carries it to the TaskManager)."""
        if self.key_field:
            _state["key_field"] = self.key_field


def _names() -> dict[int, str]:
    names = getattr(_local, "names", None)
    if names is None:
        names = _local.names = {}
    return names


def learn_key(text: str) -> None:
    """Map the key hashes the runtime may pass for ``text`` back to ``text`` (on this thread)."""
    names = _names()
    if len(names) > 200_000:
        names.clear()
    for candidate in key_hashes(text):
        names[candidate] = text


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
        field = _state["key_field"]
        if field:
            try:
                import json

                import cloudpickle

                value = cloudpickle.loads(bytes_object)
                event = json.loads(value) if isinstance(value, str | bytes) else value
                learn_key(str(event[field] if isinstance(event, dict) else getattr(event, field)))
            except Exception:  # never break the agent for an audit nicety
                pass
        return original(bytes_object)

    wrap_to_input_event._afr_wrapped_by = (*getattr(original, "_afr_wrapped_by", ()), __name__)  # type: ignore[attr-defined]
    pju.wrap_to_input_event = wrap_to_input_event


install()

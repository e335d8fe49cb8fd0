"""Which agent key the current action runs for, so that audit records can name it.

Flink Agents resources never see the key. The runtime, however, calls
``flink_agents.runtime.flink_runner_context.flink_runner_context_switch_action_context(ctx, key)`` (by name,
through pemja) before it runs each action. Importing this module wraps that function so it also remembers
the key; :func:`current_key` returns it.

The replay job makes the TaskManager import this module while it deserialises the agent plan — before the
first action runs — by putting a :class:`KeyHookMarker` into the config of the plan's actions (Flink Agents
imports the module of every pydantic value in an action config when it loads the plan).

Proxies read :func:`current_key` when the framework *looks up* the guarded method (``chat_model.chat``,
``tool.call``), which happens synchronously in the action, so the key is right even for calls the framework
then runs on its async thread pool.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

_log = logging.getLogger(__name__)
_state: dict[str, Any] = {"key": "", "installed": False}

#: Action-config entry name carrying the marker.
MARKER_CONFIG_KEY = "_afr_audit_key_hook"


class KeyHookMarker(BaseModel):
    """Pydantic value put into action configs: loading it imports (and so installs) this module."""

    installed: bool = True


def current_key() -> str:
    """The key of the action running now ('' before the first action of this interpreter)."""
    return str(_state["key"])


def set_current_key(key: Any) -> None:
    """Set the current key (tests and the wrapped runtime function)."""
    _state["key"] = "" if key is None else str(key)


def install() -> bool:
    """Wrap the runtime's per-action context switch (idempotent). False when flink_agents is absent."""
    if _state["installed"]:
        return True
    try:
        from flink_agents.runtime import flink_runner_context as frc
    except Exception:  # flink_agents not installed (Airflow side) or not importable here
        return False
    original = frc.flink_runner_context_switch_action_context
    if getattr(original, "_afr_wrapped", False):
        _state["installed"] = True
        return True

    def flink_runner_context_switch_action_context(ctx: Any, key: Any) -> None:
        set_current_key(key)
        original(ctx, key)

    flink_runner_context_switch_action_context._afr_wrapped = True  # type: ignore[attr-defined]
    frc.flink_runner_context_switch_action_context = flink_runner_context_switch_action_context
    _state["installed"] = True
    _log.info("airflow-flink-replay: audit key hook installed")
    return True


install()

"""The unmediated-call guard: what a replayed action does outside every resource, seen and audited.

The resource proxies (:mod:`airflow_flink_replay.flink.proxies`) govern what an agent does through its chat
models, tools, vector stores and embedding models. An action can also open a socket itself (``requests.get``),
look up a host, start a process or write a file. This module installs a Python audit hook
(:func:`sys.addaudithook`, PEP 578) in the TaskManager's interpreter that sees those events —

- ``socket.connect`` / ``socket.sendto`` (resource ``socket``), ``socket.getaddrinfo`` / ``socket.gethostbyname``
  (``dns``), ``subprocess.Popen`` / ``os.system`` / ``os.exec`` / ``os.posix_spawn`` / ``os.spawn``
  (``subprocess``), ``open`` for writing outside the temp folder (``file``) —

and, for the replay's own threads only, writes an ``unmediated`` audit record and applies the policy's
``unmediated`` decision: ``block`` raises :class:`ReplayPolicyBlocked` from the hook, which aborts the call
before it happens; ``record`` / ``allow`` let it happen.

**Scope.** Every job on a TaskManager shares this interpreter, and an audit hook cannot be removed, so the
hook is armed per thread: before each action the runtime switches the action context on the task's thread
(the audit key hook wraps that switch, :mod:`airflow_flink_replay.flink.audit_context`), and the wrapper arms
the thread when the plan's configuration carries this module's guard entry (:data:`GUARD_CONFIG_KEY`, which
only replay jobs set) and disarms it otherwise — a production task on the same TaskManager is never touched.
The async pool of a replay's operator (``durable_execute_async``) is armed by its threads' name prefix.

**Not seen** (docs/policy.md): calls inside a mediated resource call or while a resource is imported and
built (those are the resource's), calls made while a module is being imported (import-time work such as
``ctypes.util.find_library`` running ``ldconfig``), writes to ``os.devnull``, native code
that opens sockets or files without going through Python's ``socket``/``open``/``os`` (C extensions, the
JVM), threads an action starts itself, reads of files, and anything before the first action of a task.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from airflow_flink_replay.core.audit import AuditRecord
from airflow_flink_replay.exceptions import ReplayPolicyBlocked

__all__ = ["GUARD_CONFIG_KEY", "Guard", "arm", "armed", "disarm", "guard_entry", "install", "mediated"]

_log = logging.getLogger(__name__)

#: Flink Agents config entry (plan configuration) that arms the guard for a replay's tasks.
GUARD_CONFIG_KEY = "afr.unmediated-guard"

_RESOURCE = {
    "socket.connect": "socket",
    "socket.sendto": "socket",
    "socket.getaddrinfo": "dns",
    "socket.gethostbyname": "dns",
    "socket.gethostbyaddr": "dns",
    "subprocess.Popen": "subprocess",
    "os.system": "subprocess",
    "os.exec": "subprocess",
    "os.posix_spawn": "subprocess",
    "os.spawn": "subprocess",
    "os.fork": "subprocess",
    "open": "file",
}
_WATCHED = frozenset(_RESOURCE)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@dataclass(frozen=True)
class Guard:
    """What an armed thread's unmediated calls get: the variant, where audits go, and the decision."""

    variant: str
    audit_dir: str
    decision: str


_local = threading.local()
#: Async pools of replay operators: thread-name prefix -> guard.
_pools: dict[str, Guard] = {}
#: Attribute of a runtime context holding its guard (per copy of this module: each arms only its own jobs).
_CTX_ATTR = "_afr_guard_" + __name__.replace(".", "_")
_UNSET = object()
_state = {"installed": False}


def guard_entry(variant: str, audit_dir: str, decision: str) -> str:
    """The :data:`GUARD_CONFIG_KEY` value a replay job puts into its agent configuration."""
    return json.dumps({"module": __name__, "variant": variant, "audit_dir": str(audit_dir), "decision": decision})


def _guard_of(ctx: Any) -> Guard | None:
    """The guard of the job whose runtime context is ``ctx`` (None: not a replay of this runtime copy).

    Kept on the context object itself, not in a table by ``id(ctx)``: a closed replay's context can be
    collected and its id reused by another job's — production's must never inherit a replay's guard."""
    cached = getattr(ctx, _CTX_ATTR, _UNSET)
    if cached is not _UNSET:
        return cached if isinstance(cached, Guard) else None
    guard = None
    try:
        raw = ctx.config.get_str(GUARD_CONFIG_KEY, None)
        entry = json.loads(raw) if raw else None
        if entry and entry.get("module") == __name__:  # another runtime copy's job: not ours to guard
            guard = Guard(entry["variant"], entry["audit_dir"], entry["decision"])
    except Exception:  # never break an action for the guard
        _log.exception("unmediated-call guard: cannot read the plan configuration")
    pool = getattr(getattr(ctx, "executor", None), "_thread_name_prefix", None)
    if guard is not None and pool:
        _pools[pool] = guard
    with contextlib.suppress(Exception):  # a context taking no attributes: its configuration is read each time
        setattr(ctx, _CTX_ATTR, guard)
    return guard


def arm(ctx: Any) -> None:
    """Arm (or disarm) this thread for the action about to run with runtime context ``ctx``."""
    _local.guard = _guard_of(ctx)


def disarm() -> None:
    """Disarm this thread (tests)."""
    _local.guard = None


@contextlib.contextmanager
def armed(guard: Guard) -> Iterator[None]:
    """This thread armed with ``guard`` inside the block (the agent check's sample run, which has no Flink
    runtime context to arm from); the hook is installed first."""
    install()
    previous = getattr(_local, "guard", None)
    _local.guard = guard
    try:
        yield
    finally:
        _local.guard = previous


def _current_guard() -> Guard | None:
    guard = getattr(_local, "guard", None)
    if guard is None and _pools:
        guard = _pools.get(threading.current_thread().name.rpartition("_")[0])
    return guard


@contextlib.contextmanager
def mediated() -> Iterator[None]:
    """Calls made inside are a mediated resource call's own (the proxies wrap each call in this)."""
    _local.mediated = getattr(_local, "mediated", 0) + 1
    try:
        yield
    finally:
        _local.mediated -= 1


def _exempt_path(path: str, guard: Guard) -> bool:
    full = os.path.abspath(path)
    if full == os.devnull or full.endswith(".pyc") or "__pycache__" in full:
        return True
    return any(full.startswith(os.path.abspath(d) + os.sep) for d in (guard.audit_dir, tempfile.gettempdir()))


def _detail(event: str, args: tuple[Any, ...], guard: Guard) -> str | None:
    """What the call was about (host:port, command, path), or None when the event is not a concern."""
    if event == "open":
        path, mode, flags = (*args, None, None, None)[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if not writes or not isinstance(path, str | bytes | os.PathLike):  # a file descriptor: opened before
            return None
        text = os.fsdecode(path)
        return None if _exempt_path(text, guard) else text
    if event in ("socket.connect", "socket.sendto"):
        address = args[-1] if args else None
        if isinstance(address, tuple) and len(address) >= 2:
            return f"{address[0]}:{address[1]}"
        return None if isinstance(address, str | bytes) else str(address)  # AF_UNIX paths: local IPC
    if event.startswith("socket."):
        return f"{args[0]}" + (f":{args[1]}" if len(args) > 1 and args[1] is not None else "")
    return " ".join(str(a) for a in (args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:2]))[:300]


def _importing() -> bool:
    """Whether the event comes from a module being imported (e.g. ``ctypes.util.find_library`` running
    ``ldconfig`` while a library loads): the import's doing, not the action's."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _WATCHED or getattr(_local, "busy", False) or getattr(_local, "mediated", 0):
        return
    guard = _current_guard()
    if guard is None or _importing():
        return
    _local.busy = True
    try:
        detail = _detail(event, args, guard)
        if detail is None:
            return
        _audit(guard, event, detail)
    except Exception:  # the guard must never break a call by its own fault; only a block decision does
        _log.exception("unmediated-call guard: cannot handle %s", event)
        return
    finally:
        _local.busy = False
    if guard.decision == "block":
        raise ReplayPolicyBlocked(
            f"replay policy blocks an unmediated {_RESOURCE[event]} call ({event} {detail}) made by the agent's "
            "action outside every resource; reach it through a tool or resource the policy governs, or set the "
            "policy's unmediated decision to record"
        )


def _audit(guard: Guard, event: str, detail: str) -> None:
    from airflow_flink_replay.flink.audit_context import current_key

    record = AuditRecord.for_call(
        variant=guard.variant,
        key=current_key(),
        resource_type="unmediated",
        resource_name=_RESOURCE[event],
        method=event,
        args=(detail,),
        kwargs={},
        decision=guard.decision,
        outcome="blocked" if guard.decision == "block" else "ok",
    )
    from airflow_flink_replay.flink.audit_sink import write_audit

    try:
        write_audit(guard.audit_dir, record)
    except OSError:
        _log.exception("unmediated-call guard: cannot write the audit record for %s %s", event, detail)
    _log.warning("replay %s: unmediated %s %s (%s)", guard.variant, event, detail, guard.decision)


def install() -> None:
    """Add the audit hook to this interpreter (once per copy of this module)."""
    if not _state["installed"]:
        sys.addaudithook(_hook)
        _state["installed"] = True

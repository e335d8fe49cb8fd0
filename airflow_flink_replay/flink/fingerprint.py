"""Fingerprints of an agent plan's resources: what tells the agent check that the candidate changed one.

A replay serves production's recorded results (its cassette) to the calls production made; a resource the
candidate changed must not be served them — the candidate's tool code would never run, and the gate could not
see the change. The agent check fingerprints every resource provider of both plans
(:func:`provider_fingerprint`) and the Airflow side compares them
(:func:`~airflow_flink_replay.core.agent_check.changed_resources`).

What is hashed (SHA-256, the first 16 hex digits):

- a Python tool (a ``FunctionTool``): its function's code — bytecode, constants (nested code objects
  recursively), names, local and closure variable names, argument counts, default values — and, once each,
  the functions and classes *of the same module* its code names as globals, and the plain values (strings,
  numbers, tuples, compiled patterns ...) of the same-module globals it names. Not the source text (comments
  and line numbers do not count), not the function's own docstring (the model's description of the tool: it
  does not change what the tool returns), never a module name, qualified name or memory address: the replay
  imports a candidate's package under a content-hashed name (:mod:`~airflow_flink_replay.flink.agent_build`),
  so an unchanged tool must digest alike under any module name;
- a prompt or any other serialised resource: its class name and its serialised form (the prompt's text or
  messages) as canonical JSON;
- a descriptor resource (chat model setup, connection, vector store, embedding model, MCP server): its class
  name, the code of the class (its methods, as for a tool) when it can be imported, and its arguments with the
  agent configuration's entries for that class, as canonical JSON. Argument values go into the digest only.

Limits: code reached through *other* modules (a helper module the tool imports, a library) is not followed;
values built at import time other than plain data count by their type only. Pure Python: no Flink Agents
import (providers are read by their attributes), never Airflow.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["DIGEST_CHARS", "class_fingerprint", "function_fingerprint", "provider_fingerprint"]

#: Hex digits kept of the SHA-256.
DIGEST_CHARS = 16
#: Code objects and classes followed per fingerprint at most (a tool that names a large module's functions).
MAX_FOLLOWED = 2000
#: Module names of a content-hashed build (:func:`~airflow_flink_replay.flink.agent_build.import_isolated`).
_ISOLATED = re.compile(r"\bafr_build_[0-9a-f]{16}\b")
#: Memory addresses in a ``repr``.
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")
_PLAIN = (str, int, float, complex, bool, bytes, type(None), type(Ellipsis))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def _clean(text: str) -> str:
    """``text`` without memory addresses and build module names."""
    return _ADDRESS.sub("", _ISOLATED.sub("<build>", text))


def _type_name(obj: Any) -> str:
    """The qualified name of ``obj``'s type, without its module (a build's module name differs)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return cls.__qualname__


class _Walk:
    """One fingerprint's walk over code, following same-module globals once each (a visited set)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self._keep: list[Any] = []  # keeps the followed objects alive, so their ids stay theirs

    def _first_visit(self, obj: Any) -> bool:
        if id(obj) in self.seen or len(self.seen) >= MAX_FOLLOWED:
            return False
        self.seen.add(id(obj))
        self._keep.append(obj)
        return True

    def value(self, value: Any, module: str | None, depth: int = 0) -> str:
        """Canonical text of a constant or a global's value (functions and classes of ``module`` followed)."""
        if isinstance(value, _PLAIN):
            return f"{type(value).__name__}:{value!r}"
        if depth > 20:
            return "<deep>"
        if isinstance(value, tuple | list):
            inner = ",".join(self.value(v, module, depth + 1) for v in value)
            return f"{type(value).__name__}[{inner}]"
        if isinstance(value, frozenset | set):  # sorted: a set's order follows string hashing, per process
            inner = ",".join(sorted(self.value(v, module, depth + 1) for v in value))
            return f"{type(value).__name__}{{{inner}}}"
        if isinstance(value, Mapping):
            items = sorted(f"{self.value(k, module, depth + 1)}:{self.value(v, module, depth + 1)}"
                           for k, v in value.items())  # fmt: skip
            return f"{_type_name(value)}{{{','.join(items)}}}"
        if isinstance(value, types.CodeType):
            return self.code(value, module)
        if isinstance(value, re.Pattern):
            return f"re:{value.pattern!r}/{value.flags}"
        if isinstance(value, staticmethod | classmethod):
            return f"{type(value).__name__}({self.value(value.__func__, module, depth + 1)})"
        if isinstance(value, types.FunctionType):
            return self.function(value)
        if isinstance(value, type):
            return self.cls(value) if value.__module__ == module else f"class:{value.__qualname__}"
        if isinstance(value, types.ModuleType):
            return "module"
        return f"object:{_type_name(value)}"

    def function(self, func: types.FunctionType) -> str:
        """A function's code, defaults and closure (the code's same-module globals followed)."""
        if not self._first_visit(func):
            return "fn:<seen>" if id(func) in self.seen else "fn:<more>"
        module = getattr(func, "__module__", None)
        code = func.__code__
        consts = code.co_consts
        if func.__doc__ is not None and consts and consts[0] == func.__doc__:
            consts = (None, *consts[1:])  # its docstring is the tool's description, not its behaviour
        cells = tuple(c.cell_contents if _filled(c) else "<empty>" for c in func.__closure__ or ())
        text = "fn(" + ";".join([
            self.code(code, module, consts=consts, named=False),
            "defaults=" + self.value(func.__defaults__ or (), module),
            "kwdefaults=" + self.value(func.__kwdefaults__ or {}, module),
            "closure=" + self.value(cells, module),
            "globals=" + self.globals_of(code, func.__globals__, module),
        ]) + ")"  # fmt: skip
        wrapped = getattr(func, "__wrapped__", None)  # functools.wraps: the decorated function too
        if isinstance(wrapped, types.FunctionType):
            text += "wraps:" + self.function(wrapped)
        return text

    def code(self, code: types.CodeType, module: str | None, *, consts: tuple | None = None, named: bool = True) -> str:
        """A code object: bytecode, constants (nested code recursively), names; no line numbers or file."""
        consts = code.co_consts if consts is None else consts
        return "code(" + ";".join([
            code.co_name if named else "",  # a nested function's or lambda's name; not the tool's own
            code.co_code.hex(),
            code.co_exceptiontable.hex() if hasattr(code, "co_exceptiontable") else "",
            "[" + ",".join(self.value(c, module) for c in consts) + "]",
            ",".join(code.co_names),
            ",".join(code.co_varnames),
            ",".join(code.co_freevars),
            ",".join(code.co_cellvars),
            f"{code.co_argcount},{code.co_posonlyargcount},{code.co_kwonlyargcount},{code.co_flags}",
        ]) + ")"  # fmt: skip

    def globals_of(self, code: types.CodeType, namespace: Mapping[str, Any], module: str | None) -> str:
        """The globals ``code`` (and its nested code) names that live in ``module``: followed / by value."""
        found = []
        for name in sorted(set(_names(code))):
            if name not in namespace:
                continue
            value = namespace[name]
            if isinstance(value, types.FunctionType | type) and getattr(value, "__module__", None) != module:
                continue  # another module's code: not followed (documented limit)
            if isinstance(value, types.ModuleType | types.BuiltinFunctionType):
                continue
            found.append(f"{name}={self.value(value, module)}")
        return "{" + ",".join(found) + "}"

    def cls(self, cls: type) -> str:
        """A class of the walked module: its methods' code and its plain attributes, by name."""
        if not self._first_visit(cls):
            return "class:<seen>" if id(cls) in self.seen else "class:<more>"
        module = cls.__module__
        members = []
        for name, value in sorted(vars(cls).items()):
            code = isinstance(value, types.FunctionType | staticmethod | classmethod | type)
            data = not name.startswith("__") and isinstance(value, (*_PLAIN, tuple, list, frozenset, dict))
            if isinstance(value, property):
                members.append(f"{name}=property({','.join(self.value(f, module) for f in _accessors(value))})")
            elif code or data:
                members.append(f"{name}={self.value(value, module)}")
        fields = getattr(cls, "__pydantic_fields__", None) or {}  # a pydantic model's field defaults
        defaults = [f"{n}={self.value(getattr(f, 'default', None), module)}" for n, f in sorted(fields.items())]
        bases = ",".join(b.__qualname__ for b in cls.__bases__)
        return f"class({cls.__qualname__}({bases});{';'.join(members)};fields={','.join(defaults)})"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _accessors(prop: property) -> Iterator[Any]:
    return (f for f in (prop.fget, prop.fset, prop.fdel) if f is not None)


def _names(code: types.CodeType) -> Iterator[str]:
    """Every name ``code`` and its nested code objects use (globals among them)."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def function_fingerprint(func: Callable[..., Any]) -> str:
    """The digest of a Python function's code (see the module doc), the same under any module name."""
    if isinstance(func, staticmethod | classmethod):
        func = func.__func__
    if not isinstance(func, types.FunctionType):
        raise TypeError(f"not a Python function: {_type_name(func)}")
    return _digest(_clean(_Walk().function(func)))


def class_fingerprint(cls: type) -> str:
    """The digest of a class's code: its methods (their same-module globals followed) and plain attributes."""
    return _digest(_clean(_Walk().cls(cls)))


def _canonical_json(value: Any) -> str:
    """Sorted-key JSON; objects JSON cannot hold by their ``repr`` without addresses or build module names."""
    return _clean(json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False, separators=(",", ":")))


def _resolve(module: str, qualname: str) -> Any:
    """``module``'s attribute ``qualname`` (``Class.method`` walks the class)."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _tool_function(provider: Any) -> Callable[..., Any] | None:
    """The Python function behind a ``FunctionTool`` provider, or None for another tool."""
    if getattr(provider, "clazz", None) != "FunctionTool":
        return None
    func = (getattr(provider, "serialized", None) or {}).get("func") or {}
    if func.get("func_type") != "PythonFunction":
        return None
    return _resolve(func["module"], func["qualname"])  # type: ignore[no-any-return]


def _descriptor_fingerprint(provider: Any, config: Any) -> str:
    descriptor = provider.descriptor
    arguments: dict[str, Any] = {}
    if config is not None and hasattr(config, "get_config_data_by_prefix"):
        arguments.update(config.get_config_data_by_prefix(descriptor.target_clazz) or {})
    arguments.update(descriptor.arguments or {})
    try:
        code = class_fingerprint(_resolve(descriptor.target_module, descriptor.target_clazz))
    except Exception:  # a Java resource or a class this interpreter cannot import: its name and arguments
        code = "unresolved:" + _clean(descriptor.target_module)
    return _digest(f"descriptor:{descriptor.target_clazz};{code};{_canonical_json(arguments)}")


def provider_fingerprint(provider: Any, config: Any = None) -> str | None:
    """The fingerprint of one resource provider of an agent plan (``config``: the plan's ``AgentConfiguration``,
    whose entries for a descriptor's class are part of its arguments); None for a provider of a kind it does not
    know. Raises what resolving the provider's code raises (the caller reports it)."""
    if getattr(provider, "descriptor", None) is not None:
        return _descriptor_fingerprint(provider, config)
    serialized = getattr(provider, "serialized", None)
    if serialized is None:
        return None
    func = _tool_function(provider)
    if func is not None:
        return _digest("tool:" + function_fingerprint(func))
    return _digest(f"serialized:{getattr(provider, 'clazz', '')};{_canonical_json(serialized)}")

"""JSONPath helpers: the correlation-key getter and the flattening of an output into leaf paths.

Both sit on the hot path (hundreds of thousands of objects), so simple paths (``$.id``, ``$.a.b``,
``$.a[0]``, ``$['x y']``) are compiled to plain dict/list look-ups; anything else goes through jsonpath-ng.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from airflow_flink_replay.core.compare.config import ListMode, is_under, path_pattern
from airflow_flink_replay.core.jsonpath import simple_steps

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: Marker for "no value at this path" (distinct from JSON null).
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>", "__bool__": lambda self: False})()


_UNDECIDED: Any = object()


class PathError(ValueError):
    """A JSONPath that cannot be parsed."""


def compile_key(path: str) -> Callable[[Any], Any]:
    """Return ``getter(obj) -> value | MISSING`` for the JSONPath ``path``.

    Raises :class:`PathError` naming the path if it is not valid JSONPath.
    """
    if not path.startswith("$"):
        raise PathError(f"key {path!r} is not a JSONPath: it must start with '$' (e.g. '$.id')")
    steps, stop = simple_steps(path)
    if stop == len(path):
        return _simple_getter(tuple(steps))
    return _jsonpath_getter(path)



def _simple_getter(steps: tuple[str | int, ...]) -> Callable[[Any], Any]:
    if len(steps) == 1 and isinstance(steps[0], str):
        name = steps[0]

        def one(obj: Any) -> Any:
            return obj.get(name, MISSING) if isinstance(obj, dict) else MISSING

        return one

    def many(obj: Any) -> Any:
        for step in steps:
            if isinstance(step, str):
                if not isinstance(obj, dict) or step not in obj:
                    return MISSING
                obj = obj[step]
            else:
                if not isinstance(obj, list) or step >= len(obj):
                    return MISSING
                obj = obj[step]
        return obj

    return many


def _jsonpath_getter(path: str) -> Callable[[Any], Any]:
    from jsonpath_ng.exceptions import JsonPathParserError
    from jsonpath_ng.ext import parse

    try:
        expr = parse(path)
    except (JsonPathParserError, Exception) as err:  # jsonpath-ng raises several types
        raise PathError(f"key {path!r} is not valid JSONPath: {err}") from err

    def getter(obj: Any) -> Any:
        found = expr.find(obj)
        if not found:
            return MISSING
        if len(found) == 1:
            return found[0].value
        return [m.value for m in found]

    return getter


def key_text(value: Any) -> str:
    """The correlation key as text (strings as they are, anything else as canonical JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def child_path(parent: str, name: str) -> str:
    """``$.a`` + ``b`` -> ``$.a.b`` (bracket notation for names that are not identifiers)."""
    if _IDENT.match(name):
        return f"{parent}.{name}"
    return f"{parent}[{json.dumps(name)}]"


class Flattener:
    """Turns an output object into ``{leaf_path: value}``, leaving out ignored paths.

    Lists are leaves (compared as sets) or expanded by index, by ``list_mode`` and per-path set rules.
    Path strings and ignore decisions are cached, so flattening the n-th object costs little more than
    walking it.
    """

    def __init__(
        self,
        ignore: list[str],
        list_mode: ListMode = "auto",
        set_paths: list[str] | None = None,
        index_paths: list[str] | None = None,
    ) -> None:
        self._ignore = [path_pattern(p) for p in ignore]
        self._set = [path_pattern(p) for p in (set_paths or [])]
        self._index = [path_pattern(p) for p in (index_paths or [])]
        self._list_mode = list_mode
        self._child: dict[str, dict[str, str | None]] = {}
        self._item: dict[str, list[str | None]] = {}
        self._as_set: dict[str, bool | None] = {}

    def _keep(self, path: str) -> bool:
        return not any(is_under(p, path) for p in self._ignore)

    def _list_as_set(self, path: str, value: list[Any]) -> bool:
        decided = self._as_set.get(path, _UNDECIDED)
        if decided is _UNDECIDED:
            if any(p.fullmatch(path) for p in self._set):
                decided = True
            elif any(p.fullmatch(path) for p in self._index):
                decided = False
            elif self._list_mode == "auto":
                decided = None  # decided per value below (scalars only -> set)
            else:
                decided = self._list_mode == "set"
            self._as_set[path] = decided
        if decided is None:
            for v in value:
                t = type(v)
                if t is dict or t is list:
                    return False
            return True
        return bool(decided)

    def flatten(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Flatten one output object (a JSON object) into leaf paths."""
        out: dict[str, Any] = {}
        self._walk_dict("$", obj, out)
        return out

    def _walk_dict(self, prefix: str, obj: dict[str, Any], out: dict[str, Any]) -> None:
        names = self._child.get(prefix)
        if names is None:
            names = self._child[prefix] = {}
        for name, value in obj.items():
            path = names.get(name, "")
            if path == "":
                candidate = child_path(prefix, name)
                path = candidate if self._keep(candidate) else None
                names[name] = path
            if path is None:
                continue
            t = type(value)
            if t is dict:
                if value:
                    self._walk_dict(path, value, out)
                else:
                    out[path] = value
            elif t is list:
                self._walk_list(path, value, out)
            else:
                out[path] = value

    def _walk_list(self, path: str, value: list[Any], out: dict[str, Any]) -> None:
        if not value or self._list_as_set(path, value):
            out[path] = value
            return
        items = self._item.get(path)
        if items is None:
            items = self._item[path] = []
        for i, item in enumerate(value):
            if i >= len(items):
                candidate = f"{path}[{i}]"
                items.append(candidate if self._keep(candidate) else None)
            ipath = items[i]
            if ipath is None:
                continue
            t = type(item)
            if t is dict:
                if item:
                    self._walk_dict(ipath, item, out)
                else:
                    out[ipath] = item
            elif t is list:
                self._walk_list(ipath, item, out)
            else:
                out[ipath] = item


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """Best-effort inverse of :meth:`Flattener.flatten`, for rendering examples (indices become keys)."""
    root: dict[str, Any] = {}
    for path, value in flat.items():
        parts = _split(path)
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if parts:
            node[parts[-1]] = value
    return _lists(root)


def _split(path: str) -> list[str]:
    parts: list[str] = []
    for m in re.finditer(r"\.([^.\[]+)|\[(\d+)\]|\[(\"(?:[^\"\\]|\\.)*\")\]", path[1:]):
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(f"[{m.group(2)}]")
        else:
            parts.append(json.loads(m.group(3)))
    return parts


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(isinstance(k, str) and k.startswith("[") and k.endswith("]") for k in node):
        items = sorted(node.items(), key=lambda kv: int(kv[0][1:-1]))
        return [_lists(v) for _, v in items]
    return {k: _lists(v) for k, v in node.items()}

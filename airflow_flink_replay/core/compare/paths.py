"""JSONPath helpers: the correlation-key getter and the flattening of an output into leaf paths.

Both sit on the hot path (hundreds of thousands of objects), so simple paths (``$.id``, ``$.a.b``,
``$.a[0]``, ``$['x y']``) are compiled to plain dict/list look-ups; anything else goes through jsonpath-ng.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from airflow_flink_replay.core.compare.config import ListMode, is_under, path_pattern, segment
from airflow_flink_replay.core.jsonpath import simple_steps
from airflow_flink_replay.exceptions import NestingError, PathError

__all__ = [
    "MISSING",
    "Flattener",
    "Group",
    "PathError",
    "child_path",
    "compile_key",
    "differing_paths",
    "json_type",
    "key_text",
    "same_flat",
    "same_json",
    "same_types",
    "unflatten",
]

#: Marker for "no value at this path" (distinct from JSON null).
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>", "__bool__": lambda self: False})()


_UNDECIDED: Any = object()


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
    """``$.a`` + ``b`` -> ``$.a.b``; ``$.a`` + ``x y`` -> ``$.a['x y']`` (the canonical form, no JSON escapes)."""
    return parent + segment(name)


class Group(dict[str, Any]):
    """The value of a collapsed map path (``$.decision_by_sku.*``) in one output: ``{leaf path: value}`` for
    every leaf below the varying names. Two groups differ when any member differs."""

    __slots__ = ()


class Flattener:
    """Turns an output object into ``{leaf_path: value}``, leaving out ignored paths.

    Lists are leaves (compared as sets or multisets) or expanded by index, by ``list_mode`` and per-path
    rules. Path strings and ignore decisions are cached, so flattening the n-th object costs little more
    than walking it. It also counts, per object path, how often an object was there and how many names it
    held: after all runs are flattened, :meth:`collapse_maps` uses that to find maps keyed by ids.
    """

    def __init__(
        self,
        ignore: list[str],
        list_mode: ListMode = "auto",
        set_paths: list[str] | None = None,
        index_paths: list[str] | None = None,
        map_paths: list[str] | None = None,
        map_min_keys: int = 0,
        max_depth: int = 200,
    ) -> None:
        self._max_depth = max_depth
        self.ignore = list(ignore)
        self._ignore = [path_pattern(p) for p in ignore]
        self._set = [path_pattern(p) for p in (set_paths or [])]
        self._index = [path_pattern(p) for p in (index_paths or [])]
        self._maps = [path_pattern(p) for p in (map_paths or [])]
        self._map_min_keys = map_min_keys
        self._list_mode = list_mode
        self._child: dict[str, dict[str, str | None]] = {}
        self._item: dict[str, list[str | None]] = {}
        self._as_set: dict[str, bool | None] = {}
        #: object path -> [objects seen there, names they held in total]
        self._objects: dict[str, list[int]] = {}
        #: the ignore patterns that matched a path (by index in ``ignore``)
        self.ignore_hits: set[int] = set()
        #: leaf paths that held a boolean, or a list kept whole that may hold one: the only paths at which two
        #: outputs that are ``==`` can differ in JSON type (``true == 1`` in Python)
        self.bool_paths: set[str] = set()

    def merge(self, other: Flattener) -> None:
        """Add what a copy of this flattener, made before either flattened anything, learned from other
        outputs (in a worker process)."""
        for prefix, names in other._child.items():
            mine = self._child.setdefault(prefix, {})
            for name, path in names.items():
                mine.setdefault(name, path)
        for prefix, (objects, names_total) in other._objects.items():
            seen = self._objects.setdefault(prefix, [0, 0])
            seen[0] += objects
            seen[1] += names_total
        for path, items in other._item.items():
            mine_items = self._item.setdefault(path, [])
            mine_items.extend(items[len(mine_items) :])
        for path, decided in other._as_set.items():
            self._as_set.setdefault(path, decided)
        self.ignore_hits |= other.ignore_hits
        self.bool_paths |= other.bool_paths

    def typed_paths(self, changed: dict[str, str]) -> frozenset[str]:
        """The paths (collapsed by ``changed``, :meth:`collapse_maps`) at which outputs that are ``==`` may differ
        in JSON type: see :attr:`bool_paths`."""
        return frozenset(changed.get(p, p) for p in self.bool_paths)

    def _keep(self, path: str) -> bool:
        for i, p in enumerate(self._ignore):
            if is_under(p, path):
                self.ignore_hits.add(i)
                return False
        return True

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
                decided = self._list_mode in ("set", "multiset")
            self._as_set[path] = decided
        if decided is None:
            for v in value:
                t = type(v)
                if t is dict or t is list:
                    return False
            return True
        return bool(decided)

    def flatten(self, obj: dict[str, Any], root: str = "$") -> dict[str, Any]:
        """Flatten one output object (a JSON object) into leaf paths below ``root``: ``$`` for the last stage's
        outputs, :func:`~.config.stage_root` (``analysis:$``) for an intermediate stage's, whose ``_replay``
        (the replay's bookkeeping, the stage's mark) is always left out."""
        if root != "$" and root not in self._child:
            self._child[root] = {"_replay": None}
            self._objects[root] = [0, 0]
        out: dict[str, Any] = {}
        self._walk_dict(root, obj, out, 0)
        return out

    def _walk_dict(self, prefix: str, obj: dict[str, Any], out: dict[str, Any], depth: int) -> None:
        if depth >= self._max_depth:
            raise NestingError(prefix[:120] + ("…" if len(prefix) > 120 else ""))
        names = self._child.get(prefix)
        if names is None:
            names = self._child[prefix] = {}
            self._objects[prefix] = [0, 0]
        seen = self._objects[prefix]
        seen[0] += 1
        seen[1] += len(obj)
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
                    self._walk_dict(path, value, out, depth + 1)
                else:
                    out[path] = value
            elif t is list:
                self._walk_list(path, value, out, depth + 1)
            else:
                out[path] = value
                if t is bool:
                    self.bool_paths.add(path)

    def _is_map(self, collapsed: str, objects: int, names_total: int, distinct: int) -> bool:
        if any(p.fullmatch(collapsed) for p in self._maps):
            return True
        if collapsed[-1] == "$" or not self._map_min_keys or distinct < self._map_min_keys or not objects:
            return False  # the output itself is a record, never a map (sparse top-level fields stay fields)
        return names_total / objects <= distinct / 4

    def collapse_maps(self) -> dict[str, str]:
        """Find the objects keyed by varying ids and return ``{path: collapsed path}`` for every path below
        them (``$.decision_by_sku.SKU00042`` -> ``$.decision_by_sku.*``); empty when there are none.

        Level by level from the roots (``$``, and each intermediate stage's, ``analysis:$``: their objects are
        judged apart), so a map inside a map (``$.by_user.*.by_sku.*``) is judged over all its collapsed
        occurrences together.
        """
        # only roots end with '$': a name with one is quoted (``['a$']``)
        level = ["$", *(p for p in self._objects if p[-1] == "$" and p != "$")]
        collapsed: dict[str, str] = {p: p for p in level}
        changed: dict[str, str] = {}
        while level:
            groups: dict[str, list[Any]] = {}
            for raw in level:
                seen = self._objects.get(raw)
                if seen is not None:
                    g = groups.setdefault(collapsed[raw], [0, 0, set()])
                    g[0] += seen[0]
                    g[1] += seen[1]
                    g[2].update(self._child[raw])
            maps = {c for c, g in groups.items() if self._is_map(c, g[0], g[1], len(g[2]))}
            nxt: list[str] = []
            for raw in level:
                parent = collapsed[raw]
                children = [c for c in self._child.get(raw, {}).values() if c is not None]
                for child in children:
                    collapsed[child] = parent + ".*" if parent in maps else parent + child[len(raw) :]
                items = [c for c in self._item.get(raw, []) if c is not None]
                for child in items:
                    collapsed[child] = parent + child[len(raw) :]
                for child in (*children, *items):
                    if collapsed[child] != child:
                        changed[child] = collapsed[child]
                    nxt.append(child)
            level = nxt
        return changed

    def _walk_list(self, path: str, value: list[Any], out: dict[str, Any], depth: int) -> None:
        if not value or self._list_as_set(path, value):
            out[path] = value
            # a list of scalars holds a boolean only if it holds something == True or == False (at C speed); one
            # kept whole by a rule or list_mode may hold objects and lists too: looked into whenever ==
            if value and (True in value or False in value or self._as_set.get(path) is True):
                self.bool_paths.add(path)
            return
        if depth >= self._max_depth:
            raise NestingError(path[:120] + ("…" if len(path) > 120 else ""))
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
                    self._walk_dict(ipath, item, out, depth + 1)
                else:
                    out[ipath] = item
            elif t is list:
                self._walk_list(ipath, item, out, depth + 1)
            else:
                out[ipath] = item
                if t is bool:
                    self.bool_paths.add(ipath)


#: The JSON type of each Python type a parsed (and flattened) output holds; a collapsed map is an object.
_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    type(None): "null",
    dict: "object",
    Group: "object",
    list: "array",
}


def json_type(value: Any) -> str | None:
    """The JSON type of a parsed value: boolean, number, string, null, object or array (None for MISSING)."""
    return _JSON_TYPES.get(type(value))


def same_json(a: Any, b: Any) -> bool:
    """``a == b`` as JSON values: equal and of the same JSON type all the way down. Python's ``==`` says
    ``True == 1`` and ``False == 0`` (also inside lists and objects); JSON's ``true`` is not ``1``. ``1`` and
    ``1.0`` are the same JSON number."""
    return a == b and same_types(a, b)


def same_types(a: Any, b: Any) -> bool:
    """Whether two values that are ``==`` have the same JSON types all the way down (see :func:`same_json`)."""
    kind = _JSON_TYPES.get(type(a))
    if kind != _JSON_TYPES.get(type(b)):
        return False
    if kind == "array":
        types = list(map(type, a))
        if types == list(map(type, b)) and list not in types and dict not in types:
            return True  # the common case, at C speed: scalars of the same types in the same places
        return all(map(same_types, a, b))
    if kind == "object":
        return all(same_types(v, b[k]) for k, v in a.items())
    return True


def same_flat(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two flattened outputs that are ``==`` have the same JSON types at every path (see
    :func:`same_json`). Cheap when they do: the types compared at C speed, then only lists and collapsed maps
    looked into (an object in a flattened output is an empty one; others are walked)."""
    types = list(map(type, a.values()))
    if types != list(map(type, map(b.__getitem__, a))):
        return all(same_types(v, b[p]) for p, v in a.items())  # another type somewhere, or 1 and 1.0
    if list in types or Group in types:
        return all(same_types(v, b[p]) for p, v in a.items() if type(v) is list or type(v) is Group)
    return True


def differing_paths(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The paths of two flattened objects whose values differ (a path only one of them has included; a change
    of JSON type, ``true`` -> ``1``, is a difference), sorted."""
    return sorted(path for path in a.keys() | b.keys() if not same_json(a.get(path, MISSING), b.get(path, MISSING)))


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """Best-effort inverse of :meth:`Flattener.flatten`, for rendering examples (indices become keys)."""
    root: dict[str | int, Any] = {}
    for path, value in _expand_groups(flat):
        parts = _split(path)
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if parts:
            node[parts[-1]] = value
    return _lists(root)


def _expand_groups(flat: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for path, value in flat.items():
        if type(value) is Group:
            out.extend(value.items())
        else:
            out.append((path, value))
    return out


_SPLIT = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]")
_UNESCAPE = re.compile(r"\\(.)")


def _split(path: str) -> list[str | int]:
    """The keys of ``path`` after its root; a list index as an ``int`` (an object's key ``'[0]'`` stays a string)."""
    parts: list[str | int] = []
    for m in _SPLIT.finditer(path, path.find("$") + 1):  # after the root (``$`` or a stage's, ``analysis:$``)
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(int(m.group(2)))
        else:
            parts.append(_UNESCAPE.sub(r"\1", m.group(3)))
    return parts


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(isinstance(k, int) for k in node):
        return [_lists(v) for _, v in sorted(node.items())]
    return {k: _lists(v) for k, v in node.items()}

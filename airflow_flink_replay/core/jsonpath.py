"""The plain-look-up subset of JSONPath, shared by the comparison's key getter and the Flink side's
event-time extractor (which must not import the comparison engine: the Flink-side venv has no rapidfuzz).
Pure (``re`` only)."""

from __future__ import annotations

import re

_SIMPLE_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]|\[\s*'([^']*)'\s*\]|\[\s*\"([^\"]*)\"\s*\]")


def simple_steps(path: str) -> tuple[list[str | int], int]:
    """The plain look-up steps after a JSONPath's ``$`` (``$.a.b``, ``$['a']``, ``$.a[0]`` →
    ``["a", "b"]``, ``["a"]``, ``["a", 0]``) and the position where they stop: ``len(path)`` when the whole
    path is plain dict/list look-ups, else where a filter, wildcard or slice begins."""
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _SIMPLE_STEP.match(path, pos)
        if not m:
            break
        name, index, quoted, dquoted = m.groups()
        steps.append(int(index) if index is not None else (name or quoted or dquoted or ""))
        pos = m.end()
    return steps, pos

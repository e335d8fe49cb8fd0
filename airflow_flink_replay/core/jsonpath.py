"""The plain-look-up subset of JSONPath, shared by the comparison's key getter and the Flink side's
event-time extractor (which must not import the comparison engine: the Flink-side venv has no rapidfuzz).
Pure (``re`` only)."""

from __future__ import annotations

import re

# a name starts with a letter of any script or ``_`` (``.priorité``, ``.été``, ``.日本``: the canonical form the
# report shows); in a quoted name a backslash escapes a backslash or the quote (``$['back\\slash']``: back\slash)
_SIMPLE_STEP = re.compile(
    r"\.([^\W\d][\w-]*)|\[(\d+)\]|\[\s*'((?:[^'\\]|\\.)*)'\s*\]|\[\s*\"((?:[^\"\\]|\\.)*)\"\s*\]"
)
_ESCAPE = re.compile(r"\\(.)")


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
        if index is not None:
            steps.append(int(index))
        elif name is not None:
            steps.append(name)
        else:
            steps.append(_ESCAPE.sub(r"\1", quoted if quoted is not None else dquoted))
        pos = m.end()
    return steps, pos

"""Word-level highlighting of two values for the side-by-side examples (HTML-escaped Markup)."""

from __future__ import annotations

import difflib
import re

from markupsafe import Markup, escape

_TOKEN = re.compile(r"\s+|[^\s\w]|\w+")


def highlight_pair(old: str, new: str) -> tuple[Markup, Markup]:
    """Return (old, new) as HTML with removed words in ``<del>`` and added words in ``<ins>``."""
    if old == new:
        return Markup(escape(old)), Markup(escape(new))
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    if len(a) + len(b) > 4000:  # very long values: mark the whole value
        return Markup(f"<del>{escape(old)}</del>"), Markup(f"<ins>{escape(new)}</ins>")
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    left: list[str] = []
    right: list[str] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        sa, sb = "".join(a[i1:i2]), "".join(b[j1:j2])
        if op == "equal":
            left.append(str(escape(sa)))
            right.append(str(escape(sb)))
            continue
        if sa:
            left.append(f"<del>{escape(sa)}</del>")
        if sb:
            right.append(f"<ins>{escape(sb)}</ins>")
    return Markup("".join(left)), Markup("".join(right))

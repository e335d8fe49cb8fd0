"""What the sub-commands print: text that came from a file, a manifest or a run record made safe for a terminal,
and an error as one line that names what is wrong and the fix.

A job name holding ``\\x1b[...`` or a newline, printed raw, can repaint the terminal or forge a log line ("gate
PASSED"); zero-width and bidi-override characters hide or reorder what a person reads. Every character that is not
printable (``str.isprintable``: control, format, separator, private-use and unassigned characters) is written as
an escape instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

_Model = TypeVar("_Model", bound="BaseModel")

#: Exit code of a command line argparse refuses (unknown command or option, missing argument, bad value), like
#: sysexits' EX_USAGE: 2 would read as INCONCLUSIVE in ``compare``'s contract (which keeps its own 3).
EXIT_USAGE = 64
#: Exit code of an unexpected error (a bug), like sysexits' EX_SOFTWARE: never 1, which reads as FAIL.
EXIT_INTERNAL = 70


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every non-printable character except those in ``keep`` written as ``\\xNN`` / ``\\uNNNN``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def printable_lines(text: str) -> str:
    """``text`` with its lines kept and everything else non-printable escaped (a multi-line summary)."""
    return printable(text, keep="\n")


def one_line(message: object, limit: int = 2000) -> str:
    """An error message as one printable line: its lines joined with spaces; a longer one than ``limit`` keeps its
    beginning and its end (where the fix is)."""
    text = " ".join(part.strip() for part in str(message).split("\n") if part.strip())
    if len(text) > limit:
        text = f"{text[: limit // 2]} … {text[-(limit // 2) :]}"
    return printable(text)


def _escaped(value: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(value, str):
        return printable(value)
    if isinstance(value, BaseModel):
        return escaped_model(value)
    if isinstance(value, list | tuple):
        return type(value)(_escaped(v) for v in value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    return value


def escaped_model(model: _Model) -> _Model:
    """A copy of ``model`` (a manifest, a run record) whose every text value is :func:`printable`, newlines
    included: a multi-line view built from it (``summary()``) keeps its own lines, and a value cannot add one."""
    update = {name: _escaped(getattr(model, name)) for name in type(model).model_fields}
    return model.model_copy(update=update)

"""The fenced code blocks of a documentation page, each with the marker comment that says how it is tested.

A page whose every block is exercised puts an HTML comment right before each block:

- ``<!-- file: PATH -->``: the block is the whole of the repository file PATH (a unit test compares them);
- ``<!-- run: STEP -->``: a shell block an integration test runs as it is written (STEP names it there).

A block without a marker is an error of the page (:func:`fenced_blocks` reports it with its line number).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_MARKER = re.compile(r"^<!--\s*(file|run):\s*(\S+)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its marker (``kind``, ``target``), language, text and first line (1-based)."""

    kind: str
    target: str
    lang: str
    text: str
    line: int


def fenced_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with its marker; ``ValueError`` naming the line of an unmarked one."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start, lang = i, lines[i][3:].strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{start + 1}: a fenced block is never closed")
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(before)
        if marker is None:
            raise ValueError(f"{page}:{start + 1}: a code block without a <!-- file: ... --> or <!-- run: ... --> "
                             "marker right before it: say how it is tested")
        text = "\n".join(lines[start + 1:end]) + "\n"
        blocks.append(Block(marker.group(1), marker.group(2), lang, text, start + 1))
        i = end + 1
    return blocks


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a shell block as argument lists: continuation lines joined, comments, a trailing ``&``
    and ``VAR=$(...)`` assignments left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[-1] == "&":
            words = words[:-1]
        if words:
            commands.append(words)
    return commands

"""Writing a local file without following what someone planted at its name.

A run's files (reports, run record, collected outputs) are written into folders others may be able to write
too: a symlink planted at a report's name made ``Path.write_text`` overwrite the link's target. Here a file is
written to a fresh temporary file in the same folder (created exclusively, never through a link) and then
renamed over the name (``os.replace``): a symlink or hard link at the name is replaced, its target left as it
was, and a failed write leaves the old file in place.

Pure: the standard library only.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["replacing", "write_replacing"]

#: ``O_NOFOLLOW`` where the platform has it: opening the temporary file never follows a link.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@contextmanager
def replacing(target: Path, *, encoding: str = "utf-8", errors: str = "strict") -> Iterator[IO[str]]:
    """A text file to write that becomes ``target`` when the block ends without an error (see the module doc).

    The file gets the mode a new file gets (``0o666`` less the umask), as ``Path.write_text`` gave it.
    ``errors``: how characters UTF-8 cannot hold (a lone surrogate) are written, e.g. ``backslashreplace``.
    """
    target = Path(target)
    temporary = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    try:
        with os.fdopen(fd, "w", encoding=encoding, errors=errors) as fh:
            yield fh
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_replacing(target: Path, text: str, *, errors: str = "strict") -> None:
    """Write ``text`` (UTF-8) to ``target`` through :func:`replacing`."""
    with replacing(target, errors=errors) as fh:
        fh.write(text)

"""Reading the inputs: output files (JSONL, one agent output object a line) and audit files (JSONL)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import ValidationError

from airflow_flink_replay.core.audit import AuditRecord
from airflow_flink_replay.exceptions import CompareInputError

#: A run's outputs or audit: a local path, or an open text stream (e.g. from ObjectStoragePath.open()).
Source = str | os.PathLike[str] | IO[str]


def source_name(source: Source) -> str:
    """A printable name of a source."""
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    return str(getattr(source, "name", "<stream>"))


#: Outputs nested deeper than this are refused with their line (every step below stays far from Python's
#: recursion limit: flattening, previews, deepdiff).
MAX_DEPTH = 200


def first_bad_utf8_line(data: bytes) -> tuple[int, int, int]:
    """(line, column, byte) of the first byte that is not UTF-8, or (0, 0, 0) if all of ``data`` is."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        return data.count(b"\n", 0, err.start) + 1, err.start - line_start + 1, data[err.start]
    return 0, 0, 0


def not_utf8(source: Source, err: UnicodeDecodeError, lineno_before: int | None = None) -> CompareInputError:
    """The error for a byte that is not UTF-8, naming its line (a file is read again to find it)."""
    name = source_name(source)
    fix = "Fix: write the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
    if isinstance(source, str | os.PathLike):
        line, col, byte = first_bad_utf8_line(Path(source).read_bytes())
        if line:
            return CompareInputError(name, f"not UTF-8 text (byte 0x{byte:02x} at column {col}). {fix}", line=line)
    after = f" after line {lineno_before}" if lineno_before else ""
    return CompareInputError(name, f"not UTF-8 text{after} ({err.reason}). {fix}")


#: Every byte to a space but digits to "0": a line whose translation holds 19 zeros in a row may hold an
#: integer beyond 64 bits, which orjson would turn into a float (a byte table: far faster than a regex).
_DIGITS = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
_LONG_NUMBER = b"0" * 19


def parse_line(line: str) -> Any:
    """``json.loads(line)``, about three times faster: orjson parses the line, and anything orjson refuses
    or reads differently (NaN, 1e400, lone surrogates, recursion past its limit, 19 digits or more in a row)
    goes to :func:`json.loads`, so the result and every error are json's own."""
    try:
        data = line.encode()
    except UnicodeEncodeError:
        return json.loads(line)
    if _LONG_NUMBER not in data.translate(_DIGITS):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line)


def iter_json_lines(source: Source) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; 1-based line numbers.

    Raises :class:`CompareInputError` for a missing file, a line that is not JSON, or not a JSON object.
    """
    for lineno, _line, obj in iter_json_records(source):
        yield lineno, obj


def iter_json_records(source: Source) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Like :func:`iter_json_lines`, with each line's text too: ``(line_number, line, object)``."""
    name = source_name(source)
    stream: IO[str]
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            what = "file not found" if not path.exists() else "not a regular file (a folder, a device or a pipe)"
            raise CompareInputError(name, f"{what}. Fix: give the path of a JSONL file (one JSON object per line)")
        try:
            stream = path.open("r", encoding="utf-8")
        except OSError as err:
            raise CompareInputError(name, f"cannot open: {err.strerror}. Fix: give a JSONL file you can read") from err
        close = True
    else:
        stream = source
        close = False
    loads = parse_line
    lineno = 0
    try:
        for lineno, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except ValueError as err:
                raise CompareInputError(
                    name, f"invalid JSON ({err}). Fix: each line must be one JSON object", line=lineno
                ) from None
            except RecursionError:
                raise CompareInputError(
                    name,
                    "nested too deeply for the JSON reader (about 1000 levels). Fix: have the agent emit outputs "
                    f"nested at most {MAX_DEPTH} levels deep",
                    line=lineno,
                ) from None
            if not isinstance(obj, dict):
                raise CompareInputError(
                    name,
                    f"expected a JSON object, got {type(obj).__name__}. Fix: each line must be one object",
                    line=lineno,
                )
            yield lineno, line, obj
    except UnicodeDecodeError as err:
        raise not_utf8(source, err, lineno_before=lineno) from None
    finally:
        if close:
            stream.close()


def read_audit(source: Source | list[Source]) -> list[AuditRecord]:
    """Read audit records from a JSONL file, a folder of ``*.jsonl`` files (the replay job writes one per
    Python worker) or a list of sources; a bad record names its file, line and field."""
    if isinstance(source, list):
        return [rec for part in source for rec in read_audit(part)]
    if isinstance(source, str | os.PathLike) and Path(source).is_dir():
        files = sorted(Path(source).glob("*.jsonl"))
        if not files:
            raise CompareInputError(
                source_name(source), "audit folder holds no *.jsonl files. Fix: give the folder the replay wrote"
            )
        return read_audit(list(files))
    name = source_name(source)
    records = []
    for lineno, obj in iter_json_lines(source):
        try:
            records.append(AuditRecord.model_validate(obj))
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "<record>"
            raise CompareInputError(
                name, f"audit record field {field!r}: {first['msg']}. Fix: give the audit the replay wrote", line=lineno
            ) from None
    return records

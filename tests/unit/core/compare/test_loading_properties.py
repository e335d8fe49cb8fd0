"""Property-based: whatever bytes a run's output or audit file holds, the comparison's loader yields JSON objects
or raises its documented :class:`CompareInputError` (file, line, fix) — never another exception."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_flink_replay.core.compare.loading import iter_json_records, read_audit
from airflow_flink_replay.exceptions import CompareInputError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
#: Lines that are mostly JSON, sometimes broken: objects, other values, cut-off text, odd characters.
lines = st.one_of(
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.dictionaries(st.text(max_size=8), json_values, max_size=5).map(json.dumps),
    st.text(max_size=40),
    st.sampled_from(
        [
            "[" * 5000,
            "{" * 3000,
            '{"a": 1e999}',
            '{"n": ' + "9" * 5000 + "}",
            '"\\ud800"',
            "NaN",
            '{"a": "\\ud800"}',
            "\x00",
            "\ufeff{}",
        ]
    ),
)


def _write(data: bytes) -> Path:
    handle = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False)  # noqa: SIM115  (kept for the read)
    with handle:
        handle.write(data)
    return Path(handle.name)


def _load(source: object) -> int:
    try:
        return sum(1 for _ in iter_json_records(source))  # type: ignore[arg-type]
    except CompareInputError as err:
        assert str(err).strip() and "Traceback" not in str(err)
        return -1


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes_load_or_raise_the_documented_error(data: bytes) -> None:
    path = _write(data)
    try:
        _load(path)
    finally:
        path.unlink()


@SETTINGS
@given(st.lists(lines, max_size=8), st.sampled_from(["\n", "\r\n", "\r"]))
def test_random_lines_load_or_raise_the_documented_error(chosen: list[str], newline: str) -> None:
    text = newline.join(chosen)
    path = _write(text.encode("utf-8", "surrogatepass"))
    try:
        _load(path)
    finally:
        path.unlink()
    _load(io.StringIO(text))  # an open stream (ObjectStoragePath.open()) as well


@SETTINGS
@given(st.lists(lines, max_size=6))
def test_random_audit_lines_load_or_raise_the_documented_error(chosen: list[str]) -> None:
    path = _write("\n".join(chosen).encode("utf-8", "surrogatepass"))
    try:
        read_audit(path)
    except CompareInputError:
        pass
    finally:
        path.unlink()

"""Text carried back through a job graph (``core/carrier.py``): a marker, then the payload compressed and in
URL-safe base64, found again anywhere in a plan's JSON or a program's output."""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
import zlib

import pytest

from airflow_flink_replay.core.carrier import carried, encode_carried

MARKER = "afr-plan:"


@pytest.mark.parametrize(
    "payload",
    ["", "{}", '{"job": "review-triage", "uids": ["a", "b"]}', "ünïcode ✓ 🚀\n\ttabs & <tags>", "x" * 100_000],
)
def test_a_payload_comes_back_as_it_was(payload: str) -> None:
    assert carried(MARKER, encode_carried(MARKER, payload)) == payload


def test_the_encoding_uses_only_characters_that_survive_html_and_json_escaping() -> None:
    encoded = encode_carried(MARKER, "".join(chr(c) for c in range(32, 1000)))
    assert encoded.startswith(MARKER)
    body = encoded[len(MARKER) :]
    assert re.fullmatch(r"[A-Za-z0-9_=-]+", body)
    assert html.escape(body) == body and json.dumps(body) == f'"{body}"'


def test_the_payload_is_compressed() -> None:
    payload = json.dumps([{"operator": "agent", "uid": "agent-pin"}] * 500)
    encoded = encode_carried(MARKER, payload)
    assert len(encoded) < len(payload) // 10
    assert zlib.decompress(base64.urlsafe_b64decode(encoded[len(MARKER) :])).decode() == payload


def test_the_payload_is_found_inside_an_escaped_plan_and_stops_at_the_next_character_outside_the_alphabet() -> None:
    name = encode_carried(MARKER, "found")
    plan = json.dumps({"nodes": [{"description": html.escape(f'"{name}"'), "id": 1}]})
    assert "&quot;" in plan
    assert carried(MARKER, plan) == "found"
    assert carried(MARKER, f"stdout line\n{name}\nnext line") == "found"


def test_without_the_marker_there_is_nothing() -> None:
    assert carried(MARKER, "") is None
    assert carried(MARKER, encode_carried("afr-other:", "x")) is None
    assert carried(MARKER, MARKER) is None  # the marker alone carries no payload


def test_the_marker_is_taken_literally_not_as_a_pattern() -> None:
    marker = "afr.plan:"
    text = "afrXplan:" + encode_carried("", "wrong") + " " + encode_carried(marker, "right")
    assert carried(marker, text) == "right"


def test_the_first_payload_behind_the_marker_is_the_one_returned() -> None:
    text = encode_carried(MARKER, "first") + " " + encode_carried(MARKER, "second")
    assert carried(MARKER, text) == "first"


def test_a_payload_cut_short_is_an_error_never_a_wrong_text() -> None:
    encoded = encode_carried(MARKER, "a plan that was cut short in transit " * 10)
    with pytest.raises((zlib.error, binascii.Error)):
        carried(MARKER, encoded[: len(encoded) // 2])

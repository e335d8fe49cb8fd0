"""What the sub-commands print (``commands/output.py``): text from files, manifests and run records made safe for a
terminal (every non-printable character written as an escape), an error as one line, and the exit codes that
must never read as a verdict."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from airflow_flink_replay.commands.output import (
    EXIT_INTERNAL,
    EXIT_USAGE,
    escaped_model,
    one_line,
    printable,
    printable_lines,
)


def test_exit_codes_are_sysexits_never_a_verdict() -> None:
    """``compare`` exits 0 PASS, 1 FAIL, 2 INCONCLUSIVE: usage and internal errors keep clear of them."""
    assert (EXIT_USAGE, EXIT_INTERNAL) == (64, 70)
    assert not {EXIT_USAGE, EXIT_INTERNAL} & {0, 1, 2, 3}


def test_printable_text_comes_back_as_it_is() -> None:
    text = "job review-triage · ünïcode ✓ 🚀 'quoted' \\ back"
    assert printable(text) is text


@pytest.mark.parametrize(
    ("char", "escape"),
    [
        ("\x1b", "\\x1b"),  # starts a terminal control sequence
        ("\n", "\\x0a"),
        ("\r", "\\x0d"),
        ("\t", "\\x09"),
        ("\x7f", "\\x7f"),
        ("\xa0", "\\xa0"),  # a no-break space: a separator, not printable
        ("\u200b", "\\u200b"),  # zero-width space hides text
        ("\u202e", "\\u202e"),  # right-to-left override reorders it
        ("\u2028", "\\u2028"),  # line separator
        ("\ue000", "\\ue000"),  # private use
        ("\U000e0001", "\\U000e0001"),  # a tag character beyond the BMP
        ("\ud800", "\\ud800"),  # a lone surrogate
    ],
)
def test_each_non_printable_character_is_written_as_its_escape(char: str, escape: str) -> None:
    assert printable(f"a{char}b") == f"a{escape}b"


def test_a_forged_log_line_and_a_repaint_stay_on_one_visible_line() -> None:
    shown = printable("prod\n2026-01-01 gate PASSED\x1b[2J")
    assert shown == "prod\\x0a2026-01-01 gate PASSED\\x1b[2J"
    assert shown.isprintable()


def test_keep_leaves_the_named_characters_and_escapes_the_rest() -> None:
    assert printable("a\tb\nc", keep="\t") == "a\tb\\x0ac"
    assert printable_lines("line 1\nline\x1b2\n") == "line 1\nline\\x1b2\n"
    assert printable_lines("a\r\nb") == "a\\x0d\nb"  # a carriage return can still overwrite the line


def test_one_line_joins_the_lines_of_a_message_and_drops_blank_ones() -> None:
    err = ValueError("spec.yaml: not valid YAML\n\n   line 3 column 2   \nFix: correct the YAML\n")
    assert one_line(err) == "spec.yaml: not valid YAML line 3 column 2 Fix: correct the YAML"
    assert one_line("") == ""


def test_one_line_escapes_what_is_left_after_joining() -> None:
    assert one_line("bad name 'x\x1b[2J'\r\nFix: rename") == "bad name 'x\\x1b[2J' Fix: rename"


def test_a_long_message_keeps_its_beginning_and_its_end_where_the_fix_is() -> None:
    message = "cause: " + "x" * 5000 + " Fix: do this"
    shown = one_line(message, limit=100)
    head, tail = shown.split(" … ")
    assert len(head) == len(tail) == 50
    assert message.startswith(head) and shown.endswith("Fix: do this")
    assert one_line("y" * 100, limit=100) == "y" * 100  # at the limit: whole


class _Step(BaseModel):
    name: str
    attempts: int


class _Record(BaseModel):
    job: str
    note: str | None
    tags: list[str]
    pair: tuple[str, int]
    labels: dict[str, str]
    step: _Step
    steps: list[_Step]
    ratio: float


def test_escaped_model_escapes_every_text_value_however_deep_and_keeps_the_rest() -> None:
    record = _Record(
        job="prod\x1b[31m",
        note=None,
        tags=["ok", "a\nb"],
        pair=("\u202e", 3),
        labels={"k\x00": "v\u200b"},
        step=_Step(name="s\n", attempts=2),
        steps=[_Step(name="\x07", attempts=1)],
        ratio=0.5,
    )
    shown = escaped_model(record)
    assert type(shown) is _Record and type(shown.step) is _Step and type(shown.pair) is tuple
    assert shown.job == "prod\\x1b[31m" and shown.note is None
    assert shown.tags == ["ok", "a\\x0ab"]  # newlines too: a value cannot add a line to a view built from it
    assert shown.pair == ("\\u202e", 3)
    assert shown.labels == {"k\\x00": "v\\u200b"}
    assert shown.step == _Step(name="s\\x0a", attempts=2) and shown.steps == [_Step(name="\\x07", attempts=1)]
    assert shown.ratio == 0.5
    assert record.job == "prod\x1b[31m" and record.step.name == "s\n"  # a copy: the original is unchanged


def test_escaped_model_of_printable_values_equals_the_model() -> None:
    record = _Record(
        job="prod", note="n", tags=[], pair=("a", 1), labels={}, step=_Step(name="s", attempts=0), steps=[], ratio=1
    )
    assert escaped_model(record) == record

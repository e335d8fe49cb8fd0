"""Argument types the sub-commands share (``commands/arguments.py``): numbers in range refused by argparse itself,
naming the option and what it takes, and the folder and topic checks that run before the stack is touched."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from airflow_flink_replay.commands.arguments import (
    folder_problems,
    non_negative_float,
    port,
    positive_float,
    positive_int,
    topic_problems,
)


def _refused(kind: object, text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        kind(text)  # type: ignore[operator]
    return str(err.value)


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("65535", 65535), ("8081", 8081), (" 9092 ", 9092)])
def test_a_port_in_range_is_its_number(text: str, value: int) -> None:
    got = port(text)
    assert got == value and type(got) is int


@pytest.mark.parametrize("text", ["0", "65536", "-1", "x", "", "80.0", "1e3", "nan"])
def test_a_port_out_of_range_or_not_a_whole_number_is_refused_saying_the_range(text: str) -> None:
    assert _refused(port, text) == f"{text!r} is not a port (1-65535)"


def test_positive_int_has_no_upper_bound_and_refuses_zero() -> None:
    assert positive_int("1") == 1 and positive_int("10000000000") == 10_000_000_000
    assert _refused(positive_int, "0") == "'0' is not a whole number of at least 1"
    assert "whole number" in _refused(positive_int, "2.5")


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("0.25", 0.25), ("1e6", 1e6)])
def test_non_negative_float_takes_zero_and_more(text: str, value: float) -> None:
    assert non_negative_float(text) == value


@pytest.mark.parametrize("text", ["-0.001", "inf", "-inf", "nan", "NaN", "ten"])
def test_non_negative_float_refuses_negative_and_non_finite_numbers(text: str) -> None:
    assert _refused(non_negative_float, text) == f"{text!r} is not a number of 0 or more"


def test_positive_float_refuses_zero_but_takes_the_smallest_number_above_it() -> None:
    assert _refused(positive_float, "0") == "'0' is not a number above 0"
    assert _refused(positive_float, "-0.0") == "'-0.0' is not a number above 0"
    smallest = str(math.ulp(0.0))
    assert positive_float(smallest) == math.ulp(0.0)
    assert "above 0" in _refused(positive_float, "inf")


def test_argparse_refuses_a_bad_value_naming_the_option_and_exits_with_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="flink-replay")
    parser.add_argument("--kafka-port", type=port)
    parser.add_argument("--wait", type=non_negative_float)
    assert parser.parse_args(["--kafka-port", "9092", "--wait", "1.5"]) == argparse.Namespace(kafka_port=9092, wait=1.5)
    with pytest.raises(SystemExit):
        parser.parse_args(["--kafka-port", "70000"])
    assert "argument --kafka-port: '70000' is not a port (1-65535)" in capsys.readouterr().err


def test_each_type_is_named_after_the_number_it_parses() -> None:
    """argparse names a type by ``__name__`` in its own messages: ``int`` / ``float``, not ``parse``."""
    assert [t.__name__ for t in (port, positive_int, non_negative_float, positive_float)] == [
        "int",
        "int",
        "float",
        "float",
    ]


def test_existing_folders_have_no_problem(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert folder_problems("--python-path", [tmp_path, tmp_path / "a"]) == ""
    assert folder_problems("--python-path", []) == ""


def test_a_missing_folder_is_named_with_the_option_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    problem = folder_problems("--python-path", [tmp_path, missing, tmp_path / "also-missing"])
    assert problem.splitlines() == [
        f"--python-path {missing}: no such folder.",
        "Fix: the folder your package is imported from (it holds the package)",
    ]


def test_a_file_where_a_folder_is_expected_is_not_a_folder(tmp_path: Path) -> None:
    file = tmp_path / "job.py"
    file.write_text("x = 1\n")
    assert folder_problems("--python-path", [file]).startswith(f"--python-path {file}: not a folder.\nFix: ")


@pytest.mark.parametrize("topic", [None, "reviews", "a", "Prod.reviews_v2-x", "t" * 249, "..x", "x.."])
def test_legal_topic_names_or_none_have_no_problem(topic: str | None) -> None:
    assert topic_problems("--sink-topic", topic) == ""


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "t" * 250, "café", "x\n"])
def test_an_illegal_topic_name_is_named_with_the_option_and_the_rule(topic: str) -> None:
    problem = topic_problems("--sink-topic", topic)
    first, fix = problem.split("\n")
    assert first == f"--sink-topic {topic[:60]!r}: not a Kafka topic name."
    assert fix == "Fix: 1-249 characters of a-z A-Z 0-9 . _ - (not '.' or '..')"


def test_a_long_illegal_topic_is_shown_cut_to_60_characters() -> None:
    problem = topic_problems("--source-topic", "x" * 300 + "/")
    assert repr("x" * 60) in problem and "x" * 61 not in problem

"""Argument types the sub-commands share: numbers in range, refused by argparse itself (exit
:data:`~airflow_flink_replay.commands.output.EXIT_USAGE`) before anything is read or started, and the checks of
folders and topic names the commands run before they touch the stack."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path


def _number(kind: type, low: float, high: float | None, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


#: A TCP port.
port = _number(int, 1, 65535, "a port (1-65535)")
#: A count of at least one.
positive_int = _number(int, 1, None, "a whole number of at least 1")
#: A rate or duration of zero or more.
non_negative_float = _number(float, 0, None, "a number of 0 or more")
#: A rate or duration above zero.
positive_float = _number(float, math.ulp(0.0), None, "a number above 0")


def folder_problems(option: str, folders: list[Path]) -> str:
    """Why the folders given to ``option`` cannot be imported from (``""`` when each is an existing folder)."""
    for folder in folders:
        if not folder.is_dir():
            what = "no such folder" if not folder.exists() else "not a folder"
            return f"{option} {folder}: {what}.\nFix: the folder your package is imported from (it holds the package)"
    return ""


def topic_problems(option: str, topic: str | None) -> str:
    """Why ``topic`` is not a Kafka topic name (``""`` when it is one, or not given)."""
    from airflow_flink_replay.core.replay_spec import MAX_TOPIC_NAME, is_legal_topic_name

    if topic is None or is_legal_topic_name(topic):
        return ""
    return (
        f"{option} {topic[:60]!r}: not a Kafka topic name.\nFix: 1-{MAX_TOPIC_NAME} characters of a-z A-Z 0-9 "
        ". _ - (not '.' or '..')"
    )

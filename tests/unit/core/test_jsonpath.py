"""The plain look-up subset of JSONPath (``core/jsonpath.py``): the steps after ``$`` and where plain look-ups stop
(the rest goes to a full JSONPath parser)."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.jsonpath import simple_steps


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("$", []),
        ("$.id", ["id"]),
        ("$.a.b", ["a", "b"]),
        ("$.a[0]", ["a", 0]),
        ("$[12].b", [12, "b"]),
        ("$.items[3][1]", ["items", 3, 1]),
        ("$['a b']", ["a b"]),
        ('$["a.b"]', ["a.b"]),
        ("$[ 'padded' ]", ["padded"]),
        ("$['']", [""]),
        ("$.meta['x-y'].z", ["meta", "x-y", "z"]),
        ("$._private.kebab-case", ["_private", "kebab-case"]),
        ("$.priorité", ["priorité"]),  # after the first letter, any word character
        ("$.order_id2", ["order_id2"]),
    ],
)
def test_a_path_of_plain_look_ups_is_read_to_its_end(path: str, steps: list[str | int]) -> None:
    assert simple_steps(path) == (steps, len(path))


@pytest.mark.parametrize(
    ("path", "steps", "stop"),
    [
        ("$.items[*].sku", ["items"], 7),  # a wildcard
        ("$..sku", [], 1),  # descent
        ("$.a.*", ["a"], 3),
        ("$.items[?(@.qty > 1)]", ["items"], 7),  # a filter
        ("$.items[0:2]", ["items"], 7),  # a slice
        ("$.items[-1]", ["items"], 7),  # an index from the end
        ("$.1st", [], 1),  # a name that does not start with a letter must be quoted
        ("$.a.", ["a"], 3),
        ("$id", [], 1),
    ],
)
def test_the_position_where_plain_look_ups_stop(path: str, steps: list[str | int], stop: int) -> None:
    assert simple_steps(path) == (steps, stop)
    assert stop < len(path)


def test_index_steps_are_numbers_and_name_steps_are_texts() -> None:
    steps, _ = simple_steps("$.a[7]['7']")
    assert steps == ["a", 7, "7"]
    assert [type(s) for s in steps] == [str, int, str]

"""Reading a file a person gives, with bounds (``core/yaml_input.py``): a regular UTF-8 file of limited size, and one
YAML document measured while it is composed — depth and values with aliases expanded. Each refusal names the file
and the fix. (The same through ``ReplaySpec.from_yaml``: tests/unit/core/test_replay_spec_names.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_flink_replay.core import yaml_input
from airflow_flink_replay.core.yaml_input import MAX_DEPTH, MAX_VALUES, load_yaml, read_text_file

EXPECTED = "the path of your ReplaySpec YAML"


def refused_read(path: Path, max_bytes: int = 1000) -> str:
    with pytest.raises(ValueError) as err:
        read_text_file(path, f"--spec {path}", EXPECTED, max_bytes)
    return str(err.value)


def refused_yaml(text: str, label: str = "compare.yaml") -> str:
    with pytest.raises(ValueError) as err:
        load_yaml(text, label)
    message = str(err.value)
    assert message.startswith(f"{label}: ") and "Fix: " in message and "\n" not in message
    return message


# ------------------------------------------------------------------------------------------ the file
def test_a_file_at_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"n: " + b"7" * 97)  # 100 bytes
    assert read_text_file(path, "--spec", EXPECTED, 100) == "n: " + "7" * 97
    assert refused_read(path, 99) == f"--spec {path}: larger than 99 bytes. Fix: give {EXPECTED} (a few KB)"


def test_the_size_is_shown_with_thousands_separators(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"x" * 2_000_001)
    assert "larger than 2,000,000 bytes" in refused_read(path, 2_000_000)


def test_a_missing_file_says_so_and_what_to_give(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert refused_read(path) == f"--spec {path}: no such file. Fix: give {EXPECTED}"


def test_a_folder_is_refused(tmp_path: Path) -> None:
    assert refused_read(tmp_path) == f"--spec {tmp_path}: is a folder, not a file. Fix: give {EXPECTED}"


@pytest.mark.timeout(10)
def test_a_pipe_is_refused_without_being_opened(tmp_path: Path) -> None:
    """Opening a FIFO nobody writes to would wait for ever: it is refused from its type alone."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    assert "not a regular file (a device, pipe or socket)" in refused_read(fifo)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_even_through_a_link(tmp_path: Path, device: str) -> None:
    link = tmp_path / "spec.yaml"
    link.symlink_to(device)
    assert refused_read(Path(device)).endswith(f"not a regular file (a device, pipe or socket). Fix: give {EXPECTED}")
    assert "not a regular file" in refused_read(link)


def test_a_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("a: 1\n")
    (tmp_path / "spec.yaml").symlink_to(tmp_path / "real.yaml")
    assert read_text_file(tmp_path / "spec.yaml", "--spec", EXPECTED, 100) == "a: 1\n"


def test_text_that_is_not_utf8_names_the_line_column_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"name: review\nnote: caf\xe9\n")
    assert refused_read(path) == (
        f"--spec {path}:2: not UTF-8 text (byte 0xe9 at line 2, column 10). Fix: save the file as UTF-8"
    )


def test_utf8_text_comes_back_decoded(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("note: café ✓\n", encoding="utf-8")
    assert read_text_file(path, "--spec", EXPECTED, 100) == "note: café ✓\n"


# ------------------------------------------------------------------------------------------ the YAML
def test_a_document_loads_as_safe_yaml_with_anchors_and_merge_keys() -> None:
    text = "base: &b {comparator: set}\nfields:\n  - {<<: *b, path: $.a}\n  - {<<: *b, path: $.b}\n"
    assert load_yaml(text, "compare.yaml") == {
        "base": {"comparator": "set"},
        "fields": [{"comparator": "set", "path": "$.a"}, {"comparator": "set", "path": "$.b"}],
    }
    assert load_yaml("", "compare.yaml") is None


def test_nesting_up_to_the_limit_loads_and_one_level_more_is_refused() -> None:
    assert MAX_DEPTH == 64
    deepest = load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "compare.yaml")
    for _ in range(MAX_DEPTH - 1):
        deepest = deepest[0]
    assert deepest == []
    message = refused_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert message == "compare.yaml: nested too deeply (more than 64 levels). Fix: flatten it"


def test_depth_counts_the_levels_an_alias_brings() -> None:
    """40 levels behind an anchor, used 30 levels deep: 70 once expanded, although no line nests more than 40."""
    text = "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    message = refused_yaml(text)
    assert message == (
        "compare.yaml: nested too deeply once its aliases are expanded (more than 64 levels). Fix: use fewer "
        "nested aliases"
    )
    assert load_yaml("a: &a " + "[" * 30 + "]" * 30 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n", "ok") is not None


def test_aliases_count_every_value_they_expand_to() -> None:
    """An anchored list of 1,000 values used 150 times is 150,000 values: allowed; 210 times is over 200,000."""
    assert MAX_VALUES == 200_000
    anchor = "a: &a [" + ", ".join(["x"] * 999) + "]\n"
    loaded = load_yaml(anchor + "b: [" + ", ".join(["*a"] * 150) + "]\n", "compare.yaml")
    assert len(loaded["b"]) == 150 and loaded["b"][0] is loaded["a"]
    message = refused_yaml(anchor + "b: [" + ", ".join(["*a"] * 210) + "]\n")
    assert message == (
        "compare.yaml: its 210 YAML alias(es) expand to more than 200,000 values (an alias bomb). Fix: write the "
        "values out, without aliases of aliases"
    )


def test_a_document_with_more_values_than_the_limit_and_no_alias_is_refused_as_too_big(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The limit counts scalars, lists and mappings (a list of n scalars is n + 1 values); lowered here so the
    document stays small."""
    monkeypatch.setattr(yaml_input, "MAX_VALUES", 10)
    assert load_yaml("[1, 2, 3, 4, 5, 6, 7, 8, 9]", "compare.yaml") == list(range(1, 10))
    assert refused_yaml("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]") == (
        "compare.yaml: more than 10 values. Fix: a spec or config of a few KB"
    )


def test_a_recursive_alias_is_refused() -> None:
    assert refused_yaml("a: &a [1, *a]\n") == (
        "compare.yaml: a recursive YAML alias (a node holds an alias of itself): no spec needs one. Fix: write the "
        "value out"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: [1\n", "expected ',' or ']'"),
        ("a: 1\n---\nb: 2\n", "expected a single document"),
        ("!!python/object/apply:os.system ['echo unsafe']\n", "could not determine a constructor"),
        ("a: *undefined\n", "found undefined alias"),
    ],
)
def test_what_is_not_one_safe_yaml_document_is_refused_on_one_line(text: str, said: str) -> None:
    message = refused_yaml(text)
    assert message.startswith("compare.yaml: not valid YAML (") and said in message
    assert message.endswith("). Fix: correct the YAML")

"""Your own job on the local stack: references the Flink side can import, the Flink-side path link, JSONL
sample input sent byte for byte, and errors that name the field or file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.local.own_job import (
    USER_PATHS_PTH,
    OwnJobError,
    check_reference,
    link_python_path,
    load_spec,
    read_jsonl,
    running_stack,
)


def test_a_reference_must_be_module_attr_and_importable_from_a_given_folder(tmp_path: Path) -> None:
    (tmp_path / "mine" / "my_agents").mkdir(parents=True)
    check_reference("--agent-job", "my_agents.review.job:job", [tmp_path / "mine"], tmp_path / "checkout")
    (tmp_path / "single.py").write_text("")
    check_reference("--agent-job", "single:job", [tmp_path], tmp_path / "checkout")
    with pytest.raises(OwnJobError, match=r"--agent-job 'my_agents.review.job' is not a reference\.\nFix: give"):
        check_reference("--agent-job", "my_agents.review.job", [tmp_path / "mine"], tmp_path)
    with pytest.raises(OwnJobError, match=r"the package 'other' is in none of .*\nFix: --python-path"):
        check_reference("--candidate", "other.job:job", [tmp_path / "mine"], tmp_path / "checkout")


def test_folders_are_linked_into_the_flink_side_venv_once(tmp_path: Path) -> None:
    from airflow_flink_replay.local.components import venv_site_packages

    venv = tmp_path / "flink-venv"
    site = venv_site_packages(venv)
    site.mkdir(parents=True)
    stack = type("S", (), {"flink_python": str(venv / "bin" / "python")})()
    pth = link_python_path(stack, [tmp_path / "a"])  # type: ignore[arg-type]
    link_python_path(stack, [tmp_path / "a", tmp_path / "b"])  # type: ignore[arg-type]
    assert pth == site / USER_PATHS_PTH
    assert pth.read_text().splitlines() == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_jsonl_lines_are_sent_unchanged_with_their_key(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_bytes(b'{"id": 1, "text": "caf\xc3\xa9",  "x": 1.50}\n\n{"id": 2}\r\n')
    assert read_jsonl(f, "id") == [(b"1", b'{"id": 1, "text": "caf\xc3\xa9",  "x": 1.50}'), (b"2", b'{"id": 2}')]
    assert read_jsonl(f, None)[0][0] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id": 1}\n{oops\n', r"in.jsonl line 2: not JSON .*\nFix: one JSON object per line"),
        (b'[1, 2]\n', r"in.jsonl line 1: a JSON list, not an object"),
        (b'{"id": 1}\n{"other": 2}\n', r"in.jsonl line 2: no field 'id' \(--key-field\)\.\nFix:"),
        (b"\n", r"in.jsonl: no records"),
    ],
)
def test_a_bad_jsonl_file_is_refused_before_anything_is_sent(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "in.jsonl"
    f.write_bytes(content)
    with pytest.raises(OwnJobError, match=message):
        read_jsonl(f, "id")
    with pytest.raises(OwnJobError, match=r"--file .*absent.jsonl: no such file"):
        read_jsonl(tmp_path / "absent.jsonl", None)


def test_a_spec_error_names_the_file_and_the_field(tmp_path: Path) -> None:
    with pytest.raises(OwnJobError, match=r"--spec .*nope.yaml: no such file\.\nFix: .*--spec-out"):
        load_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nproduction: {job_name: j}\n")
    with pytest.raises(OwnJobError, match=r"(?s)bad.yaml.*production\.program.*Fix: correct the field"):
        load_spec(bad)


def test_no_stack_says_how_to_start_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINK_REPLAY_STACK_DIR", str(tmp_path))
    with pytest.raises(OwnJobError, match=r"the local stack is not up .*\nFix: `flink-replay stack up`"):
        running_stack()

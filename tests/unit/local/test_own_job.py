"""Your own job on the local stack: references the Flink side can import, the Flink-side path link, JSONL
sample input sent byte for byte, and errors that name the field or file and the fix."""

from __future__ import annotations

import os
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


def _venv_stack(tmp_path: Path) -> object:
    """A stack whose Flink-side venv is an empty site-packages folder under ``tmp_path``."""
    from airflow_flink_replay.local.components import venv_site_packages

    venv = tmp_path / "flink-venv"
    venv_site_packages(venv).mkdir(parents=True)
    return type("S", (), {"flink_python": str(venv / "bin" / "python")})()


def test_folders_are_linked_into_the_flink_side_venv_once(tmp_path: Path) -> None:
    from airflow_flink_replay.local.components import venv_site_packages

    stack = _venv_stack(tmp_path)
    link = link_python_path(stack, [tmp_path / "a"])  # type: ignore[arg-type]
    link_python_path(stack, [tmp_path / "a", tmp_path / "b"])  # type: ignore[arg-type]
    assert link.pth == venv_site_packages(tmp_path / "flink-venv") / USER_PATHS_PTH
    assert link.pth.read_text().splitlines() == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_the_latest_deploy_s_folder_comes_first_and_vanished_folders_are_dropped(tmp_path: Path) -> None:
    stack = _venv_stack(tmp_path)
    old, gone, new = tmp_path / "v1", tmp_path / "scratch", tmp_path / "v2"
    for folder in (old, gone, new):
        (folder / "my_agents").mkdir(parents=True)
        (folder / "my_agents" / "__init__.py").write_text("")
    (old / "helpers.py").write_text("")
    link_python_path(stack, [old])  # type: ignore[arg-type]
    link_python_path(stack, [gone])  # type: ignore[arg-type]
    (gone / "my_agents" / "__init__.py").unlink()
    (gone / "my_agents").rmdir()
    gone.rmdir()
    linked = link_python_path(stack, [new])  # type: ignore[arg-type]
    # v2's my_agents is imported, not v1's that an earlier deploy linked; the deleted scratch folder is gone
    assert linked.pth.read_text().splitlines() == [str(new), str(old)]
    assert linked.shadowed == [f"my_agents in {old} (now imported from {new})"]
    assert link_python_path(stack, [new]).pth.read_text().splitlines() == [str(new), str(old)]  # once


@pytest.mark.parametrize("name", ["bad\nimport os", "tab\there", os.fsdecode(b"caf\xe9")])
def test_a_folder_the_pth_cannot_hold_is_refused_and_the_pth_is_kept(tmp_path: Path, name: str) -> None:
    stack = _venv_stack(tmp_path)
    pth = link_python_path(stack, [tmp_path / "ok"]).pth  # type: ignore[arg-type]
    with pytest.raises(OwnJobError, match=r"--python-path .*line break, a control character or bytes that are not "
                                          r"UTF-8\.\nFix: move your package"):
        link_python_path(stack, [tmp_path / name])  # type: ignore[arg-type]
    assert pth.read_text().splitlines() == [str(tmp_path / "ok")]


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


def _stack(tmp_path: Path, url: str = "http://127.0.0.1:9", python: str | None = None) -> object:
    import sys

    from airflow_flink_replay.local.stack import StackInfo

    return StackInfo(workdir=str(tmp_path), flink_home="", flink_conf_dir="", flink_python=python or sys.executable,
                     flink_rest_url=url, kafka_bootstrap="127.0.0.1:9092", chroma_host="127.0.0.1", chroma_port=8000,
                     mem0_dir="", connector_jars=[], savepoint_dir="", checkpoint_dir="", java_home="", processes=[],
                     env={}, connections_file="")  # fmt: skip


def test_deploy_s_agent_check_runs_the_job_side_program_and_refuses_with_its_python_error(tmp_path: Path) -> None:
    """The job-side program itself, run by a Python (here this one) as deploy runs it in the stack's Flink side."""
    from airflow_flink_replay.local.demo import AgentRef
    from airflow_flink_replay.local.own_job import check_definition

    report = check_definition(_stack(tmp_path), AgentRef(reference="tests.jobs.agent_check.import_fails:job"))  # type: ignore[arg-type]
    assert report.refused
    assert report.problems[0].startswith("production job definition tests.jobs.agent_check.import_fails:job could "
                                         "not be imported on the job side: ImportError: cannot reach the feature store")
    broken = _stack(tmp_path, python=str(tmp_path / "no-python"))
    with pytest.raises(OwnJobError, match=r"Flink-side Python cannot run the agent check: .*\nFix: `flink-replay"):
        check_definition(broken, AgentRef(reference="x.y:z"))  # type: ignore[arg-type]


def test_a_production_that_keeps_failing_is_cancelled_when_deploy_started_it(tmp_path: Path) -> None:
    from airflow_flink_replay.local.own_job import production_runs
    from tests.fake_flink import JOB, PYTHON_WORKER_ERROR, FakeFlink, serve

    state = FakeFlink()
    server = serve(state)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        failures = {"exceptionHistory": {"entries": [{"stacktrace": PYTHON_WORKER_ERROR, "timestamp": t}
                                                     for t in (1, 2, 3)]}}  # fmt: skip
        state.on("GET", "/jobs/j1", (200, {**JOB, "state": "RESTARTING"}))
        state.on("GET", "/jobs/j1/exceptions", (200, failures))
        state.on("GET", "/jobs/j1/checkpoints", (200, {"counts": {}, "latest": {}, "history": []}))
        state.on("PATCH", "/jobs/j1?mode=cancel", (202, {}))
        with pytest.raises(OwnJobError) as started:
            production_runs(_stack(tmp_path, url), "j1", submitted=True, timeout=30)  # type: ignore[arg-type]
        text = str(started.value)
        assert text.startswith("production does not run: Flink job prod (j1) is failing: 3 failures in a row, since")
        assert 'gateway_import.py", line 18, in <module>' in text
        assert "\ndeploy cancelled the job (it had started it).\nFix: a module Flink's Python worker imports" in text
        assert text.endswith(f"The job's exceptions: {url}/#/job/completed/j1/exceptions")
        assert state.calls[("PATCH", "/jobs/j1?mode=cancel")] == 1
        with pytest.raises(OwnJobError, match="It was running before this deploy: cancel it in the Flink UI"):
            production_runs(_stack(tmp_path, url), "j1", submitted=False, timeout=30)  # type: ignore[arg-type]
        assert state.calls[("PATCH", "/jobs/j1?mode=cancel")] == 1  # not ours: left alone
    finally:
        state.release()
        server.shutdown()
        server.server_close()

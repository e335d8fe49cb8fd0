"""RestPythonSubmitter: the request it sends, unanswered runs never resubmitted, the Python traceback taken
from the JobManager log, and under concurrency the per-JobManager lock, collision retries, the metaspace guard.

Flink is played by the scripted HTTP server of ``tests/fake_flink.py`` (real requests, urllib3,
pydantic); the lock is a real ``flock`` contended by a real second process.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import FlinkPythonProgram
from airflow_flink_replay.hooks.flink_submit import (
    FlinkSubmissionError,
    PythonDriverLock,
    RestPythonSubmitter,
    _concurrent_driver,
    get_submitter,
    program_failure_cause,
    python_traceback_from_log,
)
from tests.fake_flink import FakeFlink, make_hook
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)

JARS = (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 1}]})
RUN = "/jars/py_flink-python.jar/run"
PLAN = "/jars/py_flink-python.jar/plan"
MB = 2**20
NO_JOBS = {
    "errors": [
        "org.apache.flink.runtime.rest.handler.RestHandlerException: Could not execute application.\n"
        "Caused by: org.apache.flink.util.FlinkRuntimeException: No jobs included in application."
    ]
}
ABORTED = {
    "errors": [
        "org.apache.flink.client.program.ProgramInvocationException: The program plan could not be "
        "fetched - the program aborted pre-maturely. The root cause may be that the main method "
        "doesn't call `env.execute()` or `env.executeAsync()`."
    ]
}


def metrics(used_mb: float, max_mb: float) -> tuple[int, Any]:
    return 200, [
        {"id": "Status.JVM.Memory.Metaspace.Used", "value": str(used_mb * MB)},
        {"id": "Status.JVM.Memory.Metaspace.Max", "value": str(max_mb * MB)},
        {"id": "Status.JVM.Memory.Heap.Used", "value": str(100 * MB)},
        {"id": "Status.JVM.Memory.Heap.Max", "value": str(500 * MB)},
    ]


def submitter(url: str, tmp_path: Path, **kwargs: Any) -> RestPythonSubmitter:
    return RestPythonSubmitter(make_hook(url), lock_dir=tmp_path, **kwargs)


PROGRAM = FlinkPythonProgram(module="airflow_flink_replay.flink.replay_job", job_name="afr-replay-gate-r1-baseline")


@pytest.mark.parametrize(
    ("details", "collision"),
    [
        (
            "java.lang.IllegalArgumentException\n\tat org.apache.flink.client.python.PythonEnvUtils.setGatewayServer",
            True,
        ),
        ("Could not execute application.\nCaused by: No jobs included in application.", True),
        ("The program plan could not be fetched - the program aborted pre-maturely.", True),
        ("The main method caused an error: null\nCaused by: java.lang.IllegalArgumentException", True),
        # the program itself failed: retrying would only fail again, and hide the traceback
        (
            "The program plan could not be fetched - the program aborted pre-maturely.\n"
            "Caused by: java.lang.RuntimeException: Python process exits with code: 1",
            False,
        ),
        ("Caused by: java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator x", False),
    ],
)
def test_every_answer_flink_gives_for_a_concurrent_python_run_is_a_collision(details: str, collision: bool) -> None:
    assert _concurrent_driver(details) is collision


def _hold_lock(base_url: str, lock_dir: str, locked: Any, release: Any) -> None:
    with PythonDriverLock(base_url, lock_dir).hold(30):
        locked.set()
        release.wait(30)


def test_the_lock_serialises_python_runs_of_one_jobmanager_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    locked, release = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold_lock, args=("http://jm-a:8081", str(tmp_path), locked, release))
    other.start()
    try:
        assert locked.wait(60)
        # another process runs a Python program on JobManager a: this one waits, then gives up naming it
        with pytest.raises(FlinkSubmissionError) as info, PythonDriverLock("http://jm-a:8081/", tmp_path).hold(0.5):
            pass
        assert "another Python program has been running on the JobManager at http://jm-a:8081" in str(info.value)
        assert "Fix:" in str(info.value)
        # a different JobManager is not held up: its lock is taken on the first try (a wait of 0 s raises)
        with PythonDriverLock("http://jm-b:8081", tmp_path).hold(0):
            pass
        release.set()
        other.join(30)
        with PythonDriverLock("http://jm-a:8081", tmp_path).hold(10):
            pass
    finally:
        release.set()
        other.join(5)
        if other.is_alive():
            other.kill()


def test_a_plan_taken_by_a_concurrent_run_is_fetched_again(fake: tuple[FakeFlink, str], tmp_path: Path) -> None:
    state, url = fake
    state.on("GET", "/jars", JARS)
    state.on("POST", PLAN, (500, ABORTED), (200, {"plan": {"jid": "p", "name": "x", "nodes": []}}))
    plan = submitter(url, tmp_path).plan(PROGRAM)
    assert plan.jid == "p" and state.calls[("POST", PLAN)] == 2


def test_a_job_another_run_submitted_is_reattached_never_submitted_twice(
    fake: tuple[FakeFlink, str], tmp_path: Path
) -> None:
    """ "No jobs included in application": this program's execute() went through the other request, whose
    executor submitted it. Submitting again would run the replay twice: the job is found by its name."""
    state, url = fake
    state.on("GET", "/jars", JARS)
    state.on("POST", RUN, (400, NO_JOBS), (200, {"jobid": "second-copy"}))
    now = int(time.time() * 1000)
    state.on("GET", "/jobs/overview", (200, {"jobs": [
        {"jid": "old", "name": PROGRAM.job_name, "state": "FINISHED", "start-time": now - 3_600_000},
        {"jid": "taken", "name": PROGRAM.job_name, "state": "RUNNING", "start-time": now + 500},
        {"jid": "other", "name": "afr-replay-gate-r1-candidate", "state": "RUNNING", "start-time": now + 600},
    ]}))  # fmt: skip
    submitted = submitter(url, tmp_path).submit(PROGRAM)
    assert submitted.job_id == "taken"
    assert state.calls[("POST", RUN)] == 1


def test_no_jobs_included_and_no_job_of_that_name_is_submitted_again(
    fake: tuple[FakeFlink, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = fake
    state.on("GET", "/jars", JARS)
    state.on("POST", RUN, (400, NO_JOBS), (200, {"jobid": "j2"}))
    state.on("GET", "/jobs/overview", (200, {"jobs": []}))
    # the name look-up waits (up to 10 s) for a submission in flight: the waits pass on a clock of the test's own
    real_monotonic, waited = time.monotonic, [0.0]
    monkeypatch.setattr(time, "sleep", lambda s: waited.__setitem__(0, waited[0] + s))
    monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + waited[0])
    assert submitter(url, tmp_path).submit(PROGRAM).job_id == "j2"
    assert state.calls[("POST", RUN)] == 2


def test_a_jobmanager_short_of_metaspace_gets_no_python_run(fake: tuple[FakeFlink, str], tmp_path: Path) -> None:
    state, url = fake
    state.on("GET", "/jars", JARS)
    state.on("POST", RUN, (200, {"jobid": "j1"}))
    state.on("GET", "/jobmanager/metrics*", metrics(used_mb=470, max_mb=512))
    with pytest.raises(FlinkSubmissionError) as info:
        submitter(url, tmp_path).submit(PROGRAM)
    message = str(info.value)
    assert "42 MB of metaspace left (470 of 512 MB used)" in message and "Nothing was submitted" in message
    assert "Fix:" in message and "replay_flink_conn_id" in message
    assert state.calls[("POST", RUN)] == 0
    # the headroom comes from the connection (or the submitter); 0 turns the check off
    assert submitter(url, tmp_path, min_metaspace_headroom_mb=32).submit(PROGRAM).job_id == "j1"
    assert RestPythonSubmitter(make_hook(url, min_metaspace_headroom_mb=0), lock_dir=tmp_path).submit(PROGRAM).job_id


def test_metrics_the_jobmanager_does_not_report_do_not_block_submission(
    fake: tuple[FakeFlink, str], tmp_path: Path
) -> None:
    state, url = fake
    state.on("GET", "/jars", JARS)
    state.on("POST", RUN, (200, {"jobid": "j1"}))
    # /jobmanager/metrics unrouted: 404
    assert submitter(url, tmp_path).submit(PROGRAM).job_id == "j1"


def test_submitters_find_flink_through_the_connection_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLINK_HOME", raising=False)
    (tmp_path / ".stack").mkdir()
    (tmp_path / ".stack" / "stack.json").write_text('{"flink_home": "/stray"}')  # ignored
    hook = make_hook("http://127.0.0.1:1", flink_home="/opt/flink", flink_conf_dir="/opt/conf", java_home="/jdk")
    cli = get_submitter("cli", hook)
    assert (cli.flink_home, cli.flink_conf_dir, cli.java_home) == ("/opt/flink", "/opt/conf", "/jdk")  # type: ignore[attr-defined]
    with pytest.raises(FlinkSubmissionError, match="set flink_home in the extra of connection"):
        get_submitter("cli", make_hook("http://127.0.0.1:1"))
    rest = get_submitter("rest", make_hook("http://127.0.0.1:1", python_jar=str(tmp_path / "flink-python.jar")))
    assert rest._local_python_jar() == tmp_path / "flink-python.jar"  # type: ignore[attr-defined]


# ------------------------------------------------------------- submission over REST, failure causes


def test_rest_submission_with_an_unanswered_run_is_not_resubmitted(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jars", (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar"}]}))
    state.on("POST", "/jars/py_flink-python.jar/run", (504, {}), (200, {"jobid": "j9"}))
    program = FlinkPythonProgram(module="jobs.prod", job_name="prod")
    with pytest.raises(FlinkSubmissionError) as info:
        RestPythonSubmitter(make_hook(url)).submit(program)
    assert state.calls[("POST", "/jars/py_flink-python.jar/run")] == 1
    first = str(info.value).splitlines()[0]
    assert first.startswith("Submitting jobs.prod over REST: outcome unknown.")
    assert "Flink may have started the job anyway" in first and "a job named 'prod'" in first


def test_rest_submitter_sends_the_program_savepoint_and_parallelism(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on(
        "GET",
        "/jars",
        (200, {"files": [{"id": "old_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 1},
                         {"id": "new_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 2},
                         {"id": "other.jar", "name": "other.jar", "uploaded": 3}]}),
    )  # fmt: skip
    state.on("POST", "/jars/new_flink-python.jar/run", (200, {"jobid": "j9"}))
    program = FlinkPythonProgram(module="jobs.prod", program_args=["--x", "1"], job_name="prod", parallelism=1)
    submitted = RestPythonSubmitter(make_hook(url)).submit(
        program, savepoint_path="file:/sp/savepoint-1", allow_non_restored_state=True, parallelism=2, job_name="p2"
    )
    assert submitted.job_id == "j9" and submitted.savepoint_path == "file:/sp/savepoint-1"
    (body,) = state.bodies[("POST", "/jars/new_flink-python.jar/run")]
    assert body == {
        "entryClass": "org.apache.flink.client.python.PythonDriver",
        "programArgsList": ["-pym", "jobs.prod", "--x", "1"],
        "savepointPath": "file:/sp/savepoint-1",
        "allowNonRestoredState": True,
        "parallelism": 2,
        "flinkConfiguration": {"parallelism.default": "2", "pipeline.name": "p2"},
    }


_DRIVER = "2026-11-29 08:54:58,742 INFO  org.apache.flink.client.python.PythonDriver                  [] - "
_ENV = "2026-11-29 08:54:58,700 INFO  org.apache.flink.client.python.PythonEnvUtils [] - Starting Python process "
JM_LOG = "\n".join(
    [
        _ENV + "with environment variables: {...}, command: /venv/bin/python -u /jobs/other.py --a 1",
        _DRIVER + "Traceback (most recent call last):",
        _DRIVER + "ValueError: not mine",
        _ENV + "with environment variables: {...}, command: /venv/bin/python -u /jobs/job.py --x 1",
        _DRIVER + "--------------------------- Python Process Started --------------------------",
        _DRIVER + "Traceback (most recent call last):",
        _DRIVER + '  File "/jobs/job.py", line 3, in <module>',
        _DRIVER + "RuntimeError: BOOM",
        _DRIVER + "--------------------------- Python Process Exited ---------------------------",
        "2026-11-29 08:54:58,764 ERROR org.apache.flink.client.python.PythonDriver [] - Run python process failed",
        "java.lang.RuntimeException: Python process exits with code: 1",
    ]
)


def test_python_traceback_is_taken_from_this_programs_run_in_the_jm_log() -> None:
    program = FlinkPythonProgram(entry_point="/jobs/job.py", program_args=["--x", "1"])
    text = python_traceback_from_log(JM_LOG, program)
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        '  File "/jobs/job.py", line 3, in <module>',
        "RuntimeError: BOOM",
    ]
    assert program_failure_cause(text) == "RuntimeError: BOOM"
    assert python_traceback_from_log(JM_LOG, FlinkPythonProgram(entry_point="/jobs/absent.py")) == ""


def test_the_jvms_slf4j_diagnostics_after_a_traceback_are_not_the_cause() -> None:
    """``flink run`` with two SLF4J bindings in lib/ (Flink Agents' fat jar beside Flink's log4j) prints SLF4J's
    diagnostics after the program's traceback: the cause is still the program's error."""
    from airflow_flink_replay.hooks.flink_submit import _cli_cause

    output = "\n".join([
        "Traceback (most recent call last):",
        '  File "/jobs/job.py", line 3, in <module>',
        "RuntimeError: boom-1",
        "SLF4J: Class path contains multiple SLF4J bindings.",
        "SLF4J: See https://www.slf4j.org/codes.html#multiple_bindings for an explanation.",
        "SLF4J: Actual binding is of type [org.apache.logging.slf4j.Log4jLoggerFactory]",
    ])
    assert _cli_cause(output) == "RuntimeError: boom-1"


def test_a_flink_url_with_credentials_in_it_is_refused_without_repeating_them() -> None:
    from airflow_flink_replay.exceptions import SpecError
    from airflow_flink_replay.hooks.flink_rest_base import rest_base_url

    for host in ("http://admin:hunter2@flink.example.com:8081", "https://admin@flink.example.com"):
        with pytest.raises(SpecError) as info:
            rest_base_url(host, None, None)
        assert "hunter2" not in str(info.value) and "admin" not in str(info.value)
        assert "Fix: put the host alone" in str(info.value)
    assert rest_base_url("flink.example.com", "https", 443) == "https://flink.example.com:443"
    assert rest_base_url("http://127.0.0.1:8081/", None, None) == "http://127.0.0.1:8081"


def test_lock_files_live_in_a_private_folder_of_this_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default lock folder is per user and created 0700, not one world-writable folder every user shares
    (where anyone could hold every submission's lock or plant a link at its name)."""
    import tempfile

    monkeypatch.delenv("FLINK_REPLAY_LOCK_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    lock = PythonDriverLock("http://jm-a:8081")
    folder = lock.path.parent
    assert folder.parent == tmp_path and str(os.getuid()) in folder.name
    assert folder.stat().st_mode & 0o777 == 0o700
    with lock.hold(0):
        pass
    assert lock.path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("planted", ["group-writable", "someone-else-s", "symlink"])
def test_a_lock_folder_others_can_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   planted: str) -> None:
    import tempfile

    monkeypatch.delenv("FLINK_REPLAY_LOCK_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"flink-replay-locks-{os.getuid()}"
    if planted == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir()
        folder.chmod(0o770 if planted == "group-writable" else 0o700)
        if planted == "someone-else-s":
            if os.getuid() != 0:
                pytest.skip("only root can give a folder to someone else")
            os.chown(folder, 54321, 54321)
    with pytest.raises(FlinkSubmissionError) as info:
        PythonDriverLock("http://jm-a:8081")
    assert str(folder) in str(info.value) and "Fix:" in str(info.value)

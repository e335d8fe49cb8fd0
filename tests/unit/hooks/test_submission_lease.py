"""The JobManager's submission lease in a shared folder: processes that behave as two hosts (each its own host lock
folder) never hold it at once; a hold that waits says how long; a holder that died frees it after its TTL; a
REST submitter takes it when the connection names ``submission_lease_uri``.

Real processes and a real folder.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from airflow_flink_replay.core.flink_models import FlinkPythonProgram
from airflow_flink_replay.exceptions import FlinkSubmissionError
from airflow_flink_replay.hooks.flink_submit import PythonDriverLock, RestPythonSubmitter
from airflow_flink_replay.hooks.submission_lease import SharedSubmissionLease
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)
from tests.fake_flink import make_hook

pytestmark = pytest.mark.unit
JM = "http://jm-a:8081"
JARS = (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 1}]})
RUN = "/jars/py_flink-python.jar/run"
PROGRAM = FlinkPythonProgram(module="airflow_flink_replay.flink.replay_job", job_name="afr-replay-gate-r1-baseline")


def _hold_repeatedly(lease_uri: str, host_tmp: str, out: str, holds: int) -> None:
    """One "host": its own temp and lock folder; records each hold's interval."""
    os.environ["TMPDIR"] = host_tmp
    os.environ["FLINK_REPLAY_LOCK_DIR"] = str(Path(host_tmp, "locks"))
    intervals = []
    for _ in range(holds):
        with SharedSubmissionLease(JM, lease_uri).hold(60) as waited:
            began = time.time()
            time.sleep(0.15)
            intervals.append((began, time.time(), waited))
    Path(out).write_text(json.dumps(intervals))


def test_two_hosts_never_hold_the_submission_lease_at_once(tmp_path: Path) -> None:
    lease_uri = f"file://{tmp_path / 'shared'}"
    ctx = multiprocessing.get_context("spawn")
    hosts = []
    for name in ("host-a", "host-b"):
        (tmp_path / name).mkdir()
        hosts.append(ctx.Process(target=_hold_repeatedly,
                                 args=(lease_uri, str(tmp_path / name), str(tmp_path / f"{name}.json"), 6)))
    for host in hosts:
        host.start()
    for host in hosts:
        host.join(120)
        assert host.exitcode == 0
    intervals = sorted(i for name in ("host-a", "host-b") for i in json.loads((tmp_path / f"{name}.json").read_text()))
    assert len(intervals) == 12
    for (_, end, _), (begin, _, _) in itertools.pairwise(intervals):
        assert begin >= end, "two hosts held the JobManager's submission lease at the same time"
    assert any(waited > 0.05 for *_, waited in intervals), "no hold ever waited: the hosts did not contend"
    # the host locks stayed apart: each host's own lock folder, so only the shared lease kept them apart
    assert (tmp_path / "host-a" / "locks") != (tmp_path / "host-b" / "locks")


def test_a_held_lease_makes_the_next_hold_wait_then_fail_naming_the_holder(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    with SharedSubmissionLease(JM, uri).hold(5), pytest.raises(FlinkSubmissionError) as info, \
            SharedSubmissionLease(JM + "/", uri).hold(0.6):  # fmt: skip
        pass
    message = str(info.value)
    assert f"JobManager at {JM}" in message and f"pid {os.getpid()}" in message and "Fix:" in message
    # another JobManager's lease is another lease
    with SharedSubmissionLease(JM, uri).hold(5), SharedSubmissionLease("http://jm-b:8081", uri).hold(0):
        pass
    # released: taken at once
    with SharedSubmissionLease(JM, uri).hold(0) as waited:
        assert waited < 0.5


def _die_holding(lease_uri: str) -> None:
    lease = SharedSubmissionLease(JM, lease_uri, ttl_s=1.5)
    with lease.hold(10):
        os._exit(0)  # the worker died mid-submission: no release


def test_a_lease_whose_holder_died_is_taken_over_after_its_ttl(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    proc = multiprocessing.get_context("spawn").Process(target=_die_holding, args=(uri,))
    proc.start()
    proc.join(60)
    started = time.monotonic()
    with SharedSubmissionLease(JM, uri).hold(30) as waited:
        assert 0.3 < waited < 10
    assert time.monotonic() - started < 15


def test_the_rest_submitter_takes_the_shared_lease_when_the_connection_names_one(tmp_path: Path) -> None:
    shared = RestPythonSubmitter(make_hook(JM, submission_lease_uri=f"file://{tmp_path}"))
    assert isinstance(shared.lock(), SharedSubmissionLease)
    assert isinstance(RestPythonSubmitter(make_hook(JM), lock_dir=tmp_path / "l").lock(), PythonDriverLock)


@pytest.mark.parametrize(("executor", "warned"), [("CeleryExecutor", True), ("LocalExecutor", False),
                                                  ("LocalExecutor,KubernetesExecutor", True)])
def test_a_host_lock_under_an_executor_of_several_hosts_warns_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, executor: str, warned: bool
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    hook = make_hook(JM)
    seen: list[str] = []
    monkeypatch.setattr(hook.log, "warning", lambda msg, *args: seen.append(msg % args))
    assert isinstance(RestPythonSubmitter(hook, lock_dir=tmp_path / "l").lock(), PythonDriverLock)
    assert bool(seen) is warned, seen
    if warned:
        assert "submission_lease_uri" in seen[0] and "Fix:" in seen[0] and JM in seen[0]

"""The Flink triggers. Their events against the scripted Flink of ``tests/fake_flink.py`` (success, Flink's
error cause, timeout, a canceled job) and serialization round trips; FlinkJobStateTrigger's cleanup: ``on_kill``
(called by the triggerer when a user kills the deferred task) cancels the awaited job only with
``cancel_on_kill`` and only while the trigger has not fired; the flag survives serialization (a triggerer
restart rebuilds the trigger from it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_flink_replay.triggers import flink as flink_triggers
from airflow_flink_replay.triggers.flink import FlinkAsyncOperationTrigger, FlinkJobStateTrigger
from tests.fake_flink import JAVA_ERROR, FakeFlink
from tests.fake_flink import JOB as FLINK_JOB
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)
from tests.unit.operators.stubs import job

JOB = "f" * 32


class StubHook:
    """The async twin the trigger polls with, and the cancel its ``on_kill`` calls; records each call."""

    calls: list[tuple[str, str]] = []
    state = "RUNNING"

    def __init__(self, flink_conn_id: str) -> None:
        self.flink_conn_id = flink_conn_id

    async def asettings(self) -> None:
        StubHook.calls.append(("asettings", self.flink_conn_id))

    def cancel_job(self, job_id: str) -> None:
        StubHook.calls.append(("cancel_job", job_id))

    @contextlib.asynccontextmanager
    async def async_session(self) -> AsyncIterator[None]:
        yield None

    async def aget_job(self, session: Any, job_id: str) -> Any:
        return job(job_id, "afr-replay-x", StubHook.state)


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> type[StubHook]:
    StubHook.calls, StubHook.state = [], "RUNNING"
    monkeypatch.setattr(flink_triggers, "FlinkRestHook", StubHook)
    return StubHook


def test_cancel_on_kill_survives_serialization() -> None:
    trigger = FlinkJobStateTrigger(job_id=JOB, target_states=["FINISHED"], cancel_on_kill=True, carry={"k": 1})
    path, kwargs = trigger.serialize()
    assert path == "airflow_flink_replay.triggers.flink.FlinkJobStateTrigger"
    rebuilt = FlinkJobStateTrigger(**kwargs)
    assert rebuilt.cancel_on_kill is True and rebuilt.carry == {"k": 1} and rebuilt.deadline == trigger.deadline
    assert FlinkJobStateTrigger(job_id=JOB).serialize()[1]["cancel_on_kill"] is False  # production's default


def test_on_kill_cancels_the_job_only_when_asked(hook: type[StubHook]) -> None:
    asyncio.run(FlinkJobStateTrigger(job_id=JOB, flink_conn_id="replays").on_kill())
    assert hook.calls == []
    asyncio.run(FlinkJobStateTrigger(job_id=JOB, flink_conn_id="replays", cancel_on_kill=True).on_kill())
    assert hook.calls == [("asettings", "replays"), ("cancel_job", JOB)]


def test_on_kill_after_the_event_leaves_the_job_alone(hook: type[StubHook]) -> None:
    trigger = FlinkJobStateTrigger(job_id=JOB, target_states=["FINISHED"], cancel_on_kill=True, poll_interval=0.01)
    hook.state = "FINISHED"

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload

    assert asyncio.run(first_event())["status"] == "success"
    asyncio.run(trigger.on_kill())
    assert ("cancel_job", JOB) not in hook.calls


def test_on_kill_logs_a_failed_cancel_instead_of_raising(
    hook: type[StubHook], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def refuse(self: StubHook, job_id: str) -> None:
        raise RuntimeError("flink unreachable")

    monkeypatch.setattr(hook, "cancel_job", refuse)
    asyncio.run(FlinkJobStateTrigger(job_id=JOB, cancel_on_kill=True).on_kill())  # does not raise
    out = capfd.readouterr()
    assert "Could not cancel Flink job" in out.out + out.err


# ------------------------------------------------------------------- events from a scripted Flink


@pytest.fixture
def conn_env(fake: tuple[FakeFlink, str], monkeypatch: pytest.MonkeyPatch) -> FakeFlink:
    state, url = fake
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLINK_FAKE", json.dumps({"conn_type": "flink_rest", "host": url, "extra": {"retries": 1}})
    )
    return state


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def test_trigger_serialize_round_trips() -> None:
    from airflow.sdk.module_loading import import_string

    for trigger in (
        FlinkAsyncOperationTrigger("j1", "t1", "stop with savepoint (drain)", "c", timeout=9, carry={"a": 1}),
        FlinkJobStateTrigger("j1", ["running"], "c", timeout=9, poll_interval=2, all_tasks_running=True),
    ):
        path, kwargs = trigger.serialize()
        again = import_string(path)(**kwargs)
        assert again.serialize() == (path, kwargs)
        assert kwargs["deadline"] == trigger.deadline  # the deadline is absolute: a restart does not extend it
        again.trigger_id = 42  # what the triggerer does (its DB id): must not touch Flink's request id
        assert again.serialize() == (path, kwargs)


def test_async_operation_trigger_events(conn_env: FakeFlink) -> None:
    conn_env.on(
        "GET",
        "/jobs/j1/savepoints/ok",
        (200, {"status": {"id": "IN_PROGRESS"}}),
        (200, {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/savepoint-1"}}),
    )
    conn_env.on(
        "GET",
        "/jobs/j1/savepoints/bad",
        (200, {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": JAVA_ERROR}}}),
    )
    conn_env.on("GET", "/jobs/j1/savepoints/slow", (200, {"status": {"id": "IN_PROGRESS"}}))
    ok = asyncio.run(
        _first_event(
            FlinkAsyncOperationTrigger("j1", "ok", flink_conn_id="flink_fake", poll_interval=0.01, carry={"k": "v"})
        )
    )
    assert ok["status"] == "success" and ok["location"] == "file:/sp/savepoint-1" and ok["carry"] == {"k": "v"}
    bad = asyncio.run(_first_event(FlinkAsyncOperationTrigger("j1", "bad", flink_conn_id="flink_fake")))
    assert bad["status"] == "error" and "Cannot map checkpoint/savepoint state" in bad["message"]
    slow = asyncio.run(
        _first_event(
            FlinkAsyncOperationTrigger("j1", "slow", flink_conn_id="flink_fake", timeout=0.3, poll_interval=0.05)
        )
    )
    assert slow["status"] == "timeout" and "did not complete within 0.3 s" in slow["message"]


def test_job_state_trigger_events(conn_env: FakeFlink) -> None:
    deploying = {**FLINK_JOB, "vertices": [{**v, "status": "DEPLOYING"} for v in FLINK_JOB["vertices"]]}
    conn_env.on("GET", "/jobs/j1", (200, deploying), (200, FLINK_JOB))
    conn_env.on("GET", "/jobs/j2", (200, {**FLINK_JOB, "jid": "j2", "state": "FAILED"}))
    conn_env.on(
        "GET",
        "/jobs/j2/exceptions",
        (200, {"exceptionHistory": {"entries": [{"exceptionName": "x", "stacktrace": JAVA_ERROR, "timestamp": 3}]}}),
    )
    conn_env.on("GET", "/jobs/j3", (200, {**FLINK_JOB, "jid": "j3", "state": "INITIALIZING"}))
    ok = asyncio.run(
        _first_event(FlinkJobStateTrigger("j1", ["RUNNING"], "flink_fake", poll_interval=0.01, all_tasks_running=True))
    )
    assert ok["status"] == "success" and ok["state"] == "RUNNING" and conn_env.calls[("GET", "/jobs/j1")] == 2
    failed = asyncio.run(_first_event(FlinkJobStateTrigger("j2", ["RUNNING"], "flink_fake")))
    assert failed["status"] == "error" and "ended FAILED" in failed["message"]
    assert "Cannot map checkpoint/savepoint state for operator abc" in failed["message"]
    slow = asyncio.run(
        _first_event(FlinkJobStateTrigger("j3", ["RUNNING"], "flink_fake", timeout=0.2, poll_interval=0.05))
    )
    assert slow["status"] == "timeout" and "(state INITIALIZING)" in slow["message"]


def test_job_state_trigger_canceled_ends_the_wait_unless_targeted(conn_env: FakeFlink) -> None:
    conn_env.on(
        "GET", "/jobs/j4", (200, {**FLINK_JOB, "jid": "j4"}), (200, {**FLINK_JOB, "jid": "j4", "state": "CANCELED"})
    )
    conn_env.on("GET", "/jobs/j4/exceptions", (200, {"exceptionHistory": {"entries": []}}))
    conn_env.on("GET", "/jobs/j5", (200, {**FLINK_JOB, "jid": "j5", "state": "CANCELED"}))
    conn_env.on(
        "GET",
        "/jobs/j5/exceptions",
        (200, {"exceptionHistory": {"entries": [{"stacktrace": "java.lang.RuntimeException: cancelled by ops"}]}}),
    )
    canceled = asyncio.run(
        _first_event(FlinkJobStateTrigger("j4", ["FINISHED"], "flink_fake", poll_interval=0.01, carry={"c": 1}))
    )
    assert canceled["status"] == "error" and canceled["state"] == "CANCELED" and canceled["carry"] == {"c": 1}
    assert canceled["message"] == "Flink job j4 ended CANCELED while waiting for ['FINISHED']: no exception recorded"
    assert conn_env.calls[("GET", "/jobs/j4")] == 2  # polled RUNNING first, then ended
    with_cause = asyncio.run(_first_event(FlinkJobStateTrigger("j5", ["RUNNING"], "flink_fake")))
    assert with_cause["status"] == "error" and "ended CANCELED" in with_cause["message"]
    assert with_cause["message"].endswith("java.lang.RuntimeException: cancelled by ops")
    targeted = asyncio.run(_first_event(FlinkJobStateTrigger("j5", ["canceled", "FINISHED"], "flink_fake")))
    assert targeted["status"] == "success" and targeted["state"] == "CANCELED"

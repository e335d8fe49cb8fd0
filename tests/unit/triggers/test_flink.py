"""FlinkJobStateTrigger's cleanup: ``on_kill`` (called by the triggerer when a user kills the deferred task)
cancels the awaited job only with ``cancel_on_kill`` and only while the trigger has not fired; the flag
survives serialization (a triggerer restart rebuilds the trigger from it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_flink_replay.triggers import flink as flink_triggers
from airflow_flink_replay.triggers.flink import FlinkJobStateTrigger
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

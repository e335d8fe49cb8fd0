"""The stop window procedure without Airflow's task machinery, on the stubbed Flink hook of the operator tests
(``tests/unit/operators/stubs.py``) with Kafka and Mem0 played by small fakes: the steps while production is
stopped, production resumed whatever step failed (and the run refused after), a retry that finds the window
closed, the memory journal trusted only when production ran without failing over, and the fence judged by
Flink's own timestamps. The operator's wiring is tests/unit/operators/test_stop_window.py; the window on the real
stack tests/integration/test_stop_window.py."""

from __future__ import annotations

import time as clock
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import (
    ExceptionHistory,
    FlinkPythonProgram,
    JobExceptions,
    ProductionPlan,
    QuiesceResult,
)
from airflow_flink_replay.core.memory_fork import ForkResult, JournalPosition, Mem0Namespace
from airflow_flink_replay.exceptions import LifecycleError, LifecycleRefusedError
from airflow_flink_replay.lifecycle import resume as resume_procedure
from airflow_flink_replay.lifecycle.stop_window import ProductionStopWindow, raise_if_failed
from airflow_flink_replay.memory.journal_reader import MemoryJournalHook
from tests.unit.operators.stubs import StubFlinkHook, StubSubmitter, job

PROD, RESUMED = "a" * 32, "b" * 32
PROGRAM = FlinkPythonProgram(entry_point="/prod.py", job_name="prod")
SAVEPOINT = "file:///sp/dag/manual__2026-12-01/savepoint-1"


class Kafka:
    """The capture topic's end offsets at the stop; closed once read."""

    closed = False

    def end_offsets(self, topic: str) -> dict[int, int]:
        return {0: 42}

    def close(self) -> None:
        self.closed = True


class Memory:
    """The cut's store: records the fork (or refuses the connection)."""

    def __init__(self, *, down: bool = False) -> None:
        self.down, self.forks = down, 0

    def fork(self, source: Mem0Namespace, target: Mem0Namespace, *, on_source_read: Any = None, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionError("the vector store at localhost:1 refused the connection")
        self.forks += 1
        if on_source_read is not None:
            on_source_read()
        return ForkResult(fork_id=kwargs["fork_id"], source=source, target=target, count=3, source_fingerprint="f" * 64,
                          history_rows=3, forked_at="2026-12-03T10:00:00+00:00", duration_s=0.2, store="chroma",
                          collection="memories")  # fmt: skip


def _quiesce() -> QuiesceResult:
    now = datetime.now(UTC)
    return QuiesceResult(
        job_id=PROD, job_name="prod", mode="drain", savepoint_path=SAVEPOINT, format_type="CANONICAL", trigger_id="t",
        requested_at=now - timedelta(seconds=1), savepoint_completed_at=now, production_stopped=True,
        in_flight_work_possible=False, plan=ProductionPlan.from_job(job(PROD, "prod")),
    )  # fmt: skip


def _window(hook: Any, **kwargs: Any) -> ProductionStopWindow:
    return ProductionStopWindow(hook, PROGRAM, "capture", kwargs.pop("kafka", Kafka()), memory_source="prod-job",  # type: ignore[arg-type]
                                memory_target="replay-baseline", fork_id="manual__2026-12-01", **kwargs)  # fmt: skip


@pytest.fixture
def flink(monkeypatch: pytest.MonkeyPatch) -> StubFlinkHook:
    """Production stopped by the window's savepoint; its resubmission RUNS at once."""
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    submitter = StubSubmitter(RESUMED)
    submit = submitter.submit

    def submit_and_run(program: Any, **kwargs: Any) -> Any:
        hook.jobs[RESUMED] = job(RESUMED, "prod", "RUNNING")
        return submit(program, **kwargs)

    submitter.submit = submit_and_run  # type: ignore[method-assign]
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: submitter)
    return hook


def test_the_window_reads_the_offsets_cuts_the_memory_and_resumes_production(flink: StubFlinkHook) -> None:
    kafka, memory = Kafka(), Memory()
    quiesce = _quiesce()
    done = _window(flink, kafka=kafka, memory=memory, overlap_resume=False).run(quiesce)
    window = done.window
    assert window is not None and window.error is None and window.start_offsets is not None
    assert window.start_offsets["offsets"] == {"0": 42} and window.start_offsets["savepoint_path"] == SAVEPOINT
    assert kafka.closed and memory.forks == 1 and window.memory_cut is not None and window.memory_cut["count"] == 3
    assert window.resumed is not None and window.resumed.job_id == RESUMED and not window.resumed.reattached
    assert window.resumed.stopped_at == quiesce.requested_at and set(window.steps_s) == {
        "savepoint", "offsets", "memory_cut", "resubmit", "running"}
    raise_if_failed(done)  # nothing failed: the run goes on


def test_a_failed_memory_cut_still_resumes_production_then_the_run_is_refused(flink: StubFlinkHook) -> None:
    done = _window(flink, memory=Memory(down=True), overlap_resume=False).run(_quiesce())
    assert done.window is not None and done.window.resumed is not None and done.window.resumed.job_id == RESUMED
    assert done.window.error == "ConnectionError: the vector store at localhost:1 refused the connection"
    with pytest.raises(LifecycleRefusedError) as refused:
        raise_if_failed(done)
    message = str(refused.value)
    assert f"Production was resumed from {SAVEPOINT} as job {RESUMED}" in message and "run the replay again" in message


def test_a_retry_after_production_ran_again_finds_the_window_closed(flink: StubFlinkHook) -> None:
    flink.jobs[RESUMED] = job(RESUMED, "prod", "RUNNING")  # an earlier try resumed production
    kafka = Kafka()
    with pytest.raises(LifecycleRefusedError, match=f"already closed: production 'prod' runs again as job {RESUMED}"):
        _window(flink, kafka=kafka, memory=Memory()).run(_quiesce(), retried=True)
    assert not kafka.closed  # nothing read


@pytest.mark.parametrize(
    ("started_s", "failures_s", "trusted"),
    [(-60, [], True), (-60, [-120], True), (-60, [5], False), (10, [], False), (-0.5, [], False)],
    ids=["ran-since", "failed-before", "failed-over-since", "started-after", "started-within-margin"],
)
def test_the_cut_trusts_the_memory_journal_only_when_production_ran_without_failing_over_since_the_precopy(
    started_s: float, failures_s: list[float], trusted: bool
) -> None:
    """A write whose journal record was never sent died with its process: Flink records that failover, and a job
    started after the pre-copy replaced one whose end nobody saw; either way the cut reads the whole namespace."""
    noted = datetime.now(UTC)
    at = int(noted.timestamp() * 1000)
    pre = SimpleNamespace(count=10, journal=JournalPosition(topic="j", offsets={0: 3}, noted_at=noted.isoformat()))
    history = ExceptionHistory.model_validate(
        {"entries": [{"exceptionName": "x", "stacktrace": "", "timestamp": at + int(1000 * f)} for f in failures_s]}
    )

    class Flink:
        def get_job(self, job_id: str) -> Any:
            return SimpleNamespace(start_time=at + int(1000 * started_s))

        def get_exceptions(self, job_id: str) -> JobExceptions:
            return JobExceptions(exceptionHistory=history)

    window = _window(Flink(), journal=MemoryJournalHook("j"))
    window.precopy = pre  # type: ignore[assignment]
    quiesce = SimpleNamespace(job_id="prod")
    journal = window.trusted_journal(quiesce)  # type: ignore[arg-type]
    assert (journal is not None) is trusted
    if journal is not None:
        assert journal.topic == "j"
    window.journal = MemoryJournalHook("another")  # a pre-copy noted another journal: not this one's
    assert window.trusted_journal(quiesce) is None  # type: ignore[arg-type]


def test_the_fence_waits_out_the_rest_cache_and_judges_by_flinks_own_running_timestamps() -> None:
    """A resumed job RUNNING since after the cut read production is fine; one RUNNING since before (or without a
    timestamp) fails the window. The check looks only once Flink's REST cache is fresher than the reads."""
    read_at = datetime.now(UTC)
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(RESUMED, "prod", "RUNNING")])
    hook.rest_cache_seconds = lambda: 0.3  # type: ignore[method-assign]
    quiesce = SimpleNamespace(job_id=PROD)
    window = _window(hook)
    hook.running_since = {RESUMED: read_at + timedelta(seconds=2)}  # type: ignore[attr-defined]
    started = clock.monotonic()
    window.fence("prod", quiesce, read_at)  # type: ignore[arg-type]
    assert clock.monotonic() - started >= 0.25  # waited until the cache was younger than the reads
    for since in (read_at - timedelta(seconds=1), read_at + timedelta(milliseconds=500), None):
        hook.running_since = {RESUMED: since}  # type: ignore[attr-defined]
        with pytest.raises(LifecycleError, match="already running"):
            window.fence("prod", quiesce, read_at)  # type: ignore[arg-type]

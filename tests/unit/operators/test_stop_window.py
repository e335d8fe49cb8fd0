"""StopWindowOperator's control flow against the stubbed Flink hook: the order of the steps inside the window,
production resumed whatever step failed, a retry that finds the window closed, and the DAG's later tasks
returning what the window did. The procedure on its own (the journal's trust, the fence) is
tests/unit/lifecycle/test_stop_window.py; the window on the real stack (a production agent writing memories up
to the stop, a store that is down at the cut) is tests/integration/test_stop_window.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.flink_models import QuiesceResult
from airflow_flink_replay.core.memory_fork import ForkResult, Mem0Namespace
from airflow_flink_replay.lifecycle import resume as resume_procedure
from airflow_flink_replay.lifecycle.stop_window import ProductionStopWindow
from airflow_flink_replay.operators.flink import QuiesceRef, ResumeJobOperator
from airflow_flink_replay.operators.manifest import RecordStartOffsetsOperator
from airflow_flink_replay.operators.mem0 import ForkMem0NamespaceOperator
from airflow_flink_replay.operators.stop_window import StopWindowOperator
from tests.unit.operators.stubs import StubFlinkHook, StubSubmitter, context, job

PROD, RESUMED = "a" * 32, "b" * 32
OFFSETS = {"topic": "capture", "offsets": {"0": 42}, "read_at": "2026-12-03T10:00:00+00:00"}
CUT = ForkResult(
    fork_id="manual__2026-12-01", source=Mem0Namespace(user_id="prod-job"),
    target=Mem0Namespace(user_id="replay-baseline"),
    count=3, source_fingerprint="f" * 64, history_rows=3, forked_at="2026-12-03T10:00:00+00:00", duration_s=0.2,
    store="chroma", collection="memories", delta=True, added=1, precopied_at="2026-12-03T09:59:00+00:00",
).model_dump(mode="json")


class Window(StopWindowOperator):
    """The window with its Kafka and Mem0 steps recorded (or failing) instead of reaching the stores; the
    resumed job starts running once the window checked it had not (``started``, set by :func:`_stack`)."""

    started: Any = None

    def __init__(self, *, steps: list[str], fail: str | None = None, **kwargs: Any) -> None:
        super().__init__(
            task_id="quiesce", job_id=PROD, mode=kwargs.pop("mode", "drain"), target_directory="file:///sp",
            capture_topic="capture", program={"entry_point": "/prod.py", "job_name": "prod"},
            memory_source="prod-job", memory_target="replay-baseline", fork_id="manual__2026-12-01", **kwargs,
        )
        self.steps, self.fail = steps, fail

    def _stop_window(self, context: Any) -> ProductionStopWindow:
        """The real window procedure, its offsets, memory cut and fence played by the methods below."""
        window = super()._stop_window(context)
        fence = window.fence
        window.read_offsets = self._read_offsets  # type: ignore[method-assign]
        window.cut_memory = lambda q, mark_read=None: self._cut_memory(window.flink, q, mark_read)  # type: ignore[method-assign]
        window.fence = lambda name, q, read_at: self._fence(fence, name, q, read_at)  # type: ignore[method-assign]
        return window

    def _read_offsets(self, quiesce: QuiesceResult) -> dict[str, Any]:
        self.steps.append("offsets")
        return OFFSETS

    def _cut_memory(self, hook: Any = None, quiesce: Any = None, mark_read: Any = None) -> dict[str, Any] | None:
        self.steps.append("memory_cut")
        if self.fail == "memory_cut":
            raise ConnectionError("the vector store at localhost:1 refused the connection")
        if mark_read is not None:
            mark_read()  # the cut read production's namespace; its writes into the fork follow
        return CUT

    def _fence(self, fence: Any, name: str, quiesce: QuiesceResult, read_at: Any) -> None:
        self.steps.append("fence")
        fence(name, quiesce, read_at)  # the window's own
        if self.started is not None:
            self.started()


def _stack(
    monkeypatch: pytest.MonkeyPatch, steps: list[str], *, runs_at_once: bool = False
) -> tuple[StubFlinkHook, StubSubmitter]:
    """Production and its savepoint; the resubmitted job INITIALIZES until the window's fence has looked at it
    (as a real resubmission does for seconds), unless ``runs_at_once`` (a cut slower than the restart)."""
    hook = StubFlinkHook([job(PROD, "prod")])
    gate = {"fenced": False}

    def fenced() -> None:
        gate["fenced"] = True
        if RESUMED in hook.jobs:
            hook.jobs[RESUMED] = job(RESUMED, "prod", "RUNNING")

    Window.started = staticmethod(fenced)

    def completed(job_id: str, trigger_id: str, **kwargs: Any) -> str:
        steps.append("savepoint")
        hook.jobs[PROD] = job(PROD, "prod", "FINISHED")
        return "file:///sp/dag/manual__2026-12-01/savepoint-1"

    hook.wait_for_savepoint = completed  # type: ignore[attr-defined]
    submitter = StubSubmitter(RESUMED)
    real_submit = submitter.submit

    def submit(program: Any, **kwargs: Any) -> Any:
        steps.append("resubmit")
        hook.jobs[RESUMED] = job(RESUMED, "prod", "RUNNING" if runs_at_once or gate["fenced"] else "INITIALIZING")
        return real_submit(program, **kwargs)

    submitter.submit = submit  # type: ignore[method-assign]
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: submitter)
    return hook, submitter


def _run(op: StopWindowOperator, hook: StubFlinkHook, ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    op.__dict__["hook"] = hook
    return op.execute(ctx or context("quiesce"))


def test_one_task_stops_reads_cuts_and_resumes_in_that_order(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    result = _run(Window(steps=steps, overlap_resume=False), hook)

    assert steps == ["savepoint", "offsets", "memory_cut", "resubmit"]
    assert [s["savepoint_path"] for s in submitter.submitted] == ["file:///sp/dag/manual__2026-12-01/savepoint-1"]
    quiesce = QuiesceResult.model_validate(result)
    assert quiesce.production_stopped and quiesce.window is not None and quiesce.window.error is None
    window = quiesce.window
    assert window.start_offsets == OFFSETS and window.memory_cut == CUT
    assert window.resumed is not None and window.resumed.job_id == RESUMED and not window.resumed.reattached
    assert window.resumed.stopped_at == quiesce.requested_at
    assert window.resumed.downtime_seconds is not None and window.resumed.downtime_seconds >= 0
    assert set(window.steps_s) == {"savepoint", "offsets", "memory_cut", "resubmit", "running"}

    # the tasks that used to do these steps return what the window did, touching neither Kafka nor Mem0
    ctx = context("start_offsets")
    assert RecordStartOffsetsOperator(task_id="start_offsets", topic="capture", quiesce_result=result,
                                      kafka_config_id="nowhere").execute(ctx) == OFFSETS
    fork = ForkMem0NamespaceOperator(task_id="fork_memory_baseline", source="prod-job", target="replay-baseline",
                                     fork_id="manual__2026-12-01", mem0_conn_id="nowhere", stop_window=result)
    assert fork.execute(context("fork_memory_baseline")) == CUT
    resume = ResumeJobOperator(task_id="resume_production", program={"entry_point": "/prod.py", "job_name": "prod"},
                               quiesce=QuiesceRef(result=result, production_job_id=PROD), job_name="prod",
                               deferrable=False)
    resume.__dict__["hook"] = hook
    assert resume.execute(context("resume_production")) == window.resumed.model_dump(mode="json")
    assert len(submitter.submitted) == 1  # never a second copy of production


def test_the_resubmission_overlaps_the_cut_which_must_end_before_production_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps)
    result = QuiesceResult.model_validate(_run(Window(steps=steps, overlap_resume=True), hook))
    assert steps[0] == "savepoint" and sorted(steps[1:]) == ["fence", "memory_cut", "offsets", "resubmit"]
    assert steps.index("offsets") < steps.index("memory_cut") < steps.index("fence")
    assert result.window is not None and result.window.error is None and result.window.resumed.job_id == RESUMED
    assert set(result.window.steps_s) == {"savepoint", "offsets", "memory_cut", "resubmit", "running"}
    assert len(submitter.submitted) == 1


def test_a_cut_that_ends_after_production_runs_again_fails_the_run_with_production_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    original = Window._cut_memory

    def slow_cut(self: Window, *args: Any) -> Any:  # the resumed job is RUNNING before the cut is over
        while RESUMED not in hook.jobs:
            pass
        return original(self, *args)

    monkeypatch.setattr(Window, "_cut_memory", slow_cut)
    with pytest.raises(AirflowFailException) as failed:
        _run(Window(steps=steps, overlap_resume=True), hook)
    message = str(failed.value)
    assert f"production's resumed job {RESUMED} was already running" in message and "overlap_resume=False" in message
    assert hook.jobs[RESUMED].state == "RUNNING" and len(submitter.submitted) == 1


def test_a_failed_memory_cut_still_resumes_production_then_fails_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    with pytest.raises(AirflowFailException) as failed:
        _run(Window(steps=steps, fail="memory_cut", overlap_resume=False), hook)
    assert steps == ["savepoint", "offsets", "memory_cut", "resubmit"]
    message = str(failed.value)
    assert "ConnectionError: the vector store at localhost:1 refused the connection" in message
    assert f"as job {RESUMED}" in message and "run the replay again" in message
    assert hook.jobs[RESUMED].state == "RUNNING" and len(submitter.submitted) == 1


def test_a_retry_after_production_ran_again_refuses_to_cut_the_window_again(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    _run(Window(steps=steps, overlap_resume=False), hook)  # the first try resumed production, then its worker died
    steps.clear()
    ctx = context("quiesce", try_number=2)
    hook.checkpoints[PROD] = {"counts": {}, "history": [{
        "id": 7, "status": "COMPLETED", "is_savepoint": True, "checkpoint_type": "SAVEPOINT",
        "trigger_timestamp": 1, "latest_ack_timestamp": 2,
        "external_path": "file:///sp/dag/manual__2026-12-01/savepoint-1"}]}
    with pytest.raises(AirflowFailException, match="stop window of this run already closed: production 'prod' runs "
                                                   f"again as job {RESUMED}"):
        _run(Window(steps=steps), hook, ctx)
    assert "offsets" not in steps and "resubmit" not in steps and len(submitter.submitted) == 1


def test_savepoint_mode_never_stops_production_and_opens_no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps)
    hook.jobs[PROD] = job(PROD, "prod")
    hook.wait_for_savepoint = lambda *a, **k: steps.append("savepoint") or "file:///sp/s-1"  # type: ignore[attr-defined]
    result = _run(Window(steps=steps, mode="savepoint"), hook)
    assert steps == ["savepoint"] and not submitter.submitted
    assert QuiesceResult.model_validate(result).window is None


def test_the_window_never_defers() -> None:
    op = Window(steps=[], deferrable=True)
    assert op.deferrable is False and op.wait_for_finished is False


@pytest.mark.parametrize(("precopied", "overlaps"), [(1_000, True), (20_000, True), (20_001, False), (None, False)])
def test_by_default_the_resubmission_overlaps_only_a_short_cut(
    monkeypatch: pytest.MonkeyPatch, precopied: int | None, overlaps: bool
) -> None:
    """A delta over a pre-copy of up to 20,000 memories, which reads the namespace again in a second or two;
    a larger one, or a full copy without a pre-copy, keeps the old order."""
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=not overlaps)
    op = Window(steps=steps)

    class Memory:
        def connect(self) -> None:
            pass

        def read_precopy(self, target: Any, *, with_snapshot: bool = False) -> Any:
            return None if precopied is None else SimpleNamespace(count=precopied, journal=None)

    op.__dict__["mem0_hook"] = Memory()
    _run(op, hook)
    assert op.overlap_resume is overlaps
    assert ("fence" in steps) is overlaps and len(submitter.submitted) == 1


def test_the_downtime_ends_when_flink_says_every_task_ran_not_when_a_poll_saw_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flink's REST API serves job states from a cache (web.refresh-interval): the window asks for the subtasks'
    own RUNNING timestamps and ends the downtime there."""
    from datetime import UTC, datetime

    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    submit = submitter.submit

    def submit_and_run(program: Any, **kwargs: Any) -> Any:
        hook.running_since = {RESUMED: datetime.now(UTC)}  # type: ignore[attr-defined]
        return submit(program, **kwargs)

    submitter.submit = submit_and_run  # type: ignore[method-assign]
    result = QuiesceResult.model_validate(_run(Window(steps=steps, overlap_resume=False), hook))
    assert result.window is not None and result.window.resumed is not None
    assert result.window.resumed.running_at == hook.running_since[RESUMED]  # type: ignore[attr-defined]
    assert result.window.resumed.downtime_seconds == round(
        (hook.running_since[RESUMED] - result.requested_at).total_seconds(), 3)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("value", "seconds"), [("200", 0.2), ("3000", 3.0), ("3 s", 3.0), ("500 ms", 0.5), ("?", 3.0)])
def test_the_rest_cache_age_is_read_from_flinks_configuration(value: str, seconds: float) -> None:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url="http://flink.test"))
    hook.get_jobmanager_config = lambda: {"web.refresh-interval": value}  # type: ignore[method-assign]
    assert hook.rest_cache_seconds() == pytest.approx(seconds)

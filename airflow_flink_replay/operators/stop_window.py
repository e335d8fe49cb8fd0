"""Production's whole stop window in one task: stop with savepoint, read the capture end offsets, take the
memory cut, resubmit, wait until RUNNING.

A replay run stops production once. Everything that must happen while it is stopped used to be a task of
its own (quiesce → start offsets → baseline fork → resume), so the downtime included the executor's
latency between them: a second or two per task under the LocalExecutor, 10 to 30 s per pod under the
KubernetesExecutor. :class:`StopWindowOperator` does all of it in one task instance without deferring,
so nothing scheduling does can land inside the window. The tasks that used to do those steps stay in the
DAG as cheap checks: they find the results in this task's XCom (``window``) and return them.

What does not need production stopped stays outside: the memory pre-copy (before), the copies of the
baseline's fork for the other variants, the capture window and the manifest (after). The old job's
Python teardown overlaps with the cut and the resubmission (``wait_for_finished=False``): the offsets
and production's memory are final once the stop's savepoint completes (drain: every in-flight agent run
ended before the barrier; no source emits after it).

Production always comes back: a failure of the offsets or the memory cut still resumes production
inside the window, then fails the task (no retry: the savepoint instant cannot be cut again once
production runs). A failure of the resubmission itself fails the task for a retry, and the DAG's
``resume_production`` task (``all_done``) reattaches or resubmits in any case.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_flink_replay.core.flink_models import (
    LIVE_STATES,
    FlinkPythonProgram,
    QuiesceResult,
    ResumeResult,
    StopWindow,
)
from airflow_flink_replay.core.memory import JournalPosition, Mem0Namespace, PrecopyManifest
from airflow_flink_replay.exceptions import FlinkRestError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.hooks.flink_submit import SubmitterKind
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.hooks.mem0 import Mem0Hook
from airflow_flink_replay.hooks.mem0_journal import MemoryJournalHook
from airflow_flink_replay.operators.flink import (
    QuiesceAndSavepointOperator,
    flink_time,
    resubmit_production,
)
from airflow_flink_replay.operators.manifest import read_start_offsets

#: The largest pre-copy whose delta cut the resubmission overlaps by default (``overlap_resume=None``).
OVERLAP_MAX_MEMORIES = 20_000
#: Milliseconds of clock difference between Airflow's worker and Flink's JobManager the window allows for: a
#: failure or a job start this close before the pre-copy counts as after it (the journal check), a task RUNNING
#: this close after the cut's last read of production counts as before it (the fence).
CLOCK_MARGIN_MS = 1_000

class StopWindowOperator(QuiesceAndSavepointOperator):
    """Quiesce production and, in ``drain``/``stop`` mode, do everything production's stop needs in the same
    task: read the capture topic's end offsets, fork the memory at the cut, resubmit production from the
    savepoint and wait until every vertex RUNS. ``savepoint`` mode never stops production: it behaves as
    :class:`QuiesceAndSavepointOperator`.

    Takes the quiesce operator's arguments (it never defers: a deferral's return would put the scheduler in
    the window; with ``lease_dir`` it holds production's lease from before the stop until the resumed job RUNS,
    and a window that did not bring production back leaves it to ``resume_production``) plus:

    :param capture_topic: the capture topic whose end offsets become the replay's start offsets (templated).
    :param offsets_before: its end offsets read before the stop (templated; see ``RecordStartOffsetsOperator``).
    :param kafka_config_id: the Kafka connection.
    :param output_topic: production's output topic: its end offsets are read too (the fidelity figure's start).
    :param cassette_topic: production's cassette topic: its end offsets are read too (the replays' cassette start).
    :param memory_source: production's memory namespace (templated; ``None``: no memory cut).
    :param memory_target: the baseline's fork namespace (templated); a pre-copy of the same ``fork_id`` there
        makes the cut a delta.
    :param memory_journal_topic: production's memory journal (``production.memory_journal_topic``): when the
        pre-copy noted its position and production did not fail over since (Flink's exception history), the cut
        reads only the memories the journal names since (:meth:`_journal`); else it reads the whole namespace.
    :param fork_id: the fork's identity (default: the DAG run id).
    :param mem0_conn_id: the Mem0 connection.
    :param program: how to resubmit production (:class:`FlinkPythonProgram` or its dict; templated).
    :param job_name: production's job name (default: the plan's).
    :param submitter: ``rest`` (default) or ``cli``.
    :param resume_timeout: seconds the resubmission and the wait until RUNNING may take.
    :param overlap_resume: start production's resubmission as soon as the savepoint completes, while the offsets
        and the memory cut are taken: its program and the job's deployment take seconds before any task RUNS, and
        the cut's last read of production is checked to have come before that (:meth:`_fence`; one that did not
        fails the run, production resumed). False: resubmit only after the cut. None (default): overlap when the
        cut is short — no memory cut, a delta over a pre-copy of at most ``OVERLAP_MAX_MEMORIES`` memories (the
        delta reads the whole namespace again: ~1.5 s per 10k here, against ~7 s from resubmission to RUNNING), or
        a delta found in production's memory journal (it reads only what production wrote since the pre-copy).

    XCom: the :class:`QuiesceResult` with ``window`` (:class:`StopWindow`): the start offsets, the memory cut,
    production's :class:`ResumeResult` (``downtime_seconds``: stop request → every vertex RUNNING) and the
    seconds of each step.
    """

    template_fields: Sequence[str] = (
        *QuiesceAndSavepointOperator.template_fields,
        "capture_topic",
        "offsets_before",
        "memory_source",
        "memory_target",
        "memory_journal_topic",
        "fork_id",
        "program",
        "job_name",
    )

    def __init__(
        self,
        *,
        capture_topic: str,
        program: FlinkPythonProgram | dict[str, Any],
        offsets_before: Mapping[str, Any] | None = None,
        kafka_config_id: str = "kafka_default",
        output_topic: str | None = None,
        cassette_topic: str | None = None,
        memory_source: Any = None,
        memory_target: Any = None,
        memory_journal_topic: str | None = None,
        fork_id: str = "{{ run_id }}",
        mem0_conn_id: str = Mem0Hook.default_conn_name,
        job_name: str | None = None,
        submitter: SubmitterKind = "rest",
        resume_timeout: float = 300.0,
        overlap_resume: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["deferrable"] = False
        kwargs.setdefault("wait_for_finished", False)
        super().__init__(**kwargs)
        self.capture_topic = capture_topic
        self.offsets_before: Any = offsets_before
        self.kafka_config_id = kafka_config_id
        self.output_topic = output_topic
        self.cassette_topic = cassette_topic
        self.memory_source = memory_source
        self.memory_target = memory_target
        self.memory_journal_topic = memory_journal_topic
        self.fork_id = fork_id
        self._precopy: PrecopyManifest | None = None
        self.mem0_conn_id = mem0_conn_id
        self.program = program.model_dump() if isinstance(program, FlinkPythonProgram) else program
        self.job_name = job_name
        self.submitter = submitter
        self.resume_timeout = float(resume_timeout)
        self.overlap_resume = overlap_resume

    def execute(self, context: Any) -> Any:
        """Connect to the memory store first (mem0's import and the store client take seconds in a fresh task
        process: not inside production's downtime), then quiesce and run the window."""
        cut = self.memory_source is not None and self.memory_target is not None
        if self.mode in ("drain", "stop") and cut:
            started = time.monotonic()
            try:
                self.mem0_hook.connect()
                self._precopy = self.mem0_hook.read_precopy(self.memory_target, with_snapshot=True)
            except Exception as exc:  # the cut inside the window fails the same way and production comes back
                self.log.warning("memory store not reachable before the stop (%s: %s)", type(exc).__name__, exc)
            else:
                self.log.info("memory store client ready in %.2f s, before the stop", time.monotonic() - started)
            if self._noted_journal() is not None:
                try:  # the consumer connected and the journal's partitions known before the stop
                    self.journal_hook.ready()
                except Exception as exc:  # the cut reads it inside the window and fails there the same way
                    self.log.warning("memory journal not reachable before the stop (%s: %s)", type(exc).__name__, exc)
        if self.overlap_resume is None:
            pre, journaled = self._precopy, self._noted_journal() is not None
            self.overlap_resume = not cut or journaled or (pre is not None and pre.count <= OVERLAP_MAX_MEMORIES)
            why = ("no cut" if not cut else "no pre-copy" if pre is None
                   else f"pre-copy of {pre.count} memories{', journaled' if journaled else ''}")  # fmt: skip
            self.log.info("production's resubmission %s the memory cut (%s)",
                          "overlaps" if self.overlap_resume else "follows", why)
        return super().execute(context)

    @cached_property
    def journal_hook(self) -> MemoryJournalHook:
        """Production's memory journal as the cut reads it (connected before the stop when the pre-copy noted it)."""
        return MemoryJournalHook(str(self.memory_journal_topic), kafka_config_id=self.kafka_config_id)

    @cached_property
    def mem0_hook(self) -> Mem0Hook:
        """The Mem0 hook of the memory cut (connected before the stop)."""
        return Mem0Hook(mem0_conn_id=self.mem0_conn_id)

    def _finish(self, context: Any, hook: FlinkRestHook, plan: Any, **kwargs: Any) -> dict[str, Any]:
        result = super()._finish(context, hook, plan, **kwargs)
        quiesce = QuiesceResult.model_validate(result)
        if not quiesce.production_stopped:
            return result
        window = self._window(context, hook, quiesce)
        if window.resumed is not None:  # every task of production's new job RUNS: the next run may stop it
            self._release_lease(context, quiesce.job_name, savepoint=quiesce.savepoint_path,
                                why=f"production RUNNING again as job {window.resumed.job_id}")  # fmt: skip
        ended = self._old_job_end(hook, quiesce.job_id)
        done = quiesce.model_copy(update={"window": window, "job_stopped_at": quiesce.job_stopped_at or ended})
        if window.error:
            downtime = window.resumed.downtime_seconds if window.resumed else None
            raise AirflowFailException(
                f"The stop window of production job {quiesce.job_id} failed: {window.error}. Production was "
                f"resumed from {quiesce.savepoint_path} as job {window.resumed.job_id if window.resumed else '?'} "
                f"after {downtime} s of downtime; this run's replay cannot go on (the savepoint instant cannot "
                "be cut again once production runs): fix the cause and run the replay again"
            )
        return done.model_dump(mode="json")

    def _window(self, context: Any, hook: FlinkRestHook, quiesce: QuiesceResult) -> StopWindow:
        """Offsets, memory cut, resubmission, RUNNING: production is stopped from the first line to the last."""
        name = self.job_name or quiesce.job_name
        if int(getattr(context["ti"], "try_number", 1) or 1) > 1:
            self._refuse_closed_window(hook, name, quiesce)
        steps = {"savepoint": round((quiesce.savepoint_completed_at - quiesce.requested_at).total_seconds(), 3)}
        offsets = cut = None
        error: str | None = None
        interrupted: BaseException | None = None
        resuming = self._start_resume(context, hook, quiesce, name, steps) if self.overlap_resume else None
        read_at: list[datetime] = []

        def mark_read() -> None:  # the last read of what production wrote (offsets, memory): the fence's instant
            if not read_at:
                read_at.append(datetime.now(UTC))

        try:
            started = time.monotonic()
            offsets = self._read_offsets(quiesce)
            steps["offsets"] = round(time.monotonic() - started, 3)
            self.inside_window(context, quiesce)
            started = time.monotonic()
            cut = self._cut_memory(hook, quiesce, mark_read)
            if cut is not None:
                steps["memory_cut"] = round(time.monotonic() - started, 3)
            mark_read()
            if resuming is not None:
                self._fence(hook, name, quiesce, read_at[0])
        except Exception as exc:  # production comes back first; the task fails after
            error = f"{type(exc).__name__}: {exc}"
            self.log.error("Inside the stop window: %s; resuming production first", error)
        except BaseException as exc:  # killed: still bring production back before going
            interrupted = exc
            error = f"interrupted ({type(exc).__name__})"
        resumed = resuming.result() if resuming is not None else self._resume(context, hook, quiesce, name, steps)
        if interrupted is not None:
            raise interrupted
        return StopWindow(start_offsets=offsets, memory_cut=cut, resumed=resumed, error=error, steps_s=steps)

    def _start_resume(
        self, context: Any, hook: FlinkRestHook, quiesce: QuiesceResult, name: str, steps: dict[str, float]
    ) -> Future[ResumeResult]:
        """Production's resubmission, started now on a thread of its own (its result or error: ``.result()``)."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="afr-resume")
        try:
            return pool.submit(self._resume, context, hook, quiesce, name, steps)
        finally:
            pool.shutdown(wait=False)

    def _fence(self, hook: FlinkRestHook, name: str, quiesce: QuiesceResult, read_at: datetime) -> None:
        """Check that no task of production's resumed job RAN before ``read_at``, when the offsets and the memory
        cut had read what production wrote (before the cut writes its fork): a task processes
        records only once it RUNS, so nothing production did after the savepoint is in what they read.

        Flink's REST API serves job states from a cache up to ``web.refresh-interval`` old, so the check waits
        until that long after ``read_at`` (the cut's writes overlap the wait), then compares the subtasks' own
        RUNNING timestamps with ``read_at`` (a JobManager clock up to ``CLOCK_MARGIN_MS`` ahead counts
        as too early).

        :raises AirflowException: a task already ran: the offsets or the cut may hold production's work after
            the savepoint (production is resumed all the same; this run's replay cannot go on).
        """
        cache_s = hook.rest_cache_seconds()
        wait = (read_at - datetime.now(UTC)).total_seconds() + cache_s
        if wait > 0:
            time.sleep(wait)
        latest_ok = read_at + timedelta(milliseconds=CLOCK_MARGIN_MS)
        for listed in hook.list_jobs().by_name(name, states=LIVE_STATES):
            if listed.jid == quiesce.job_id:
                continue
            job = hook.get_job(listed.jid)
            running = [v.name for v in job.vertices if v.processing]
            first = hook.first_running_at(job) if running else None
            if running and (first is None or first <= latest_ok):
                raise AirflowException(
                    f"production's resumed job {listed.jid} was already running ({', '.join(running)}"
                    f"{f' since {first.isoformat()}' if first else ''}) when the offsets and the memory cut had "
                    f"read production's state (at {read_at.isoformat()}): they may hold work done after the "
                    "savepoint. Fix: run the replay again; if it recurs (a slow memory cut), set overlap_resume=False"
                )

    def inside_window(self, context: Any, quiesce: QuiesceResult) -> None:
        """Runs inside the window after the offsets and before the memory cut, production still stopped and
        fenced (a seam for checks; nothing by default)."""

    def _refuse_closed_window(self, hook: FlinkRestHook, name: str, quiesce: QuiesceResult) -> None:
        """A retry after an earlier try resumed production: the cut would no longer be the savepoint's."""
        live = [j.jid for j in hook.list_jobs().by_name(name, states=LIVE_STATES) if j.jid != quiesce.job_id]
        if live:
            raise AirflowFailException(
                f"The stop window of this run already closed: production {name!r} runs again as job {live[0]} "
                f"(resumed from {quiesce.savepoint_path} by an earlier try). The capture offsets and the memory "
                "cut of the savepoint instant cannot be taken again while production runs; run the replay again"
            )

    def _read_offsets(self, quiesce: QuiesceResult) -> dict[str, Any]:
        kafka = KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)
        try:
            start = read_start_offsets(
                kafka, self.capture_topic, quiesce.model_dump(mode="json"), self.offsets_before, self.output_topic,
                self.cassette_topic,
            )
        finally:
            kafka.close()
        self.log.info("replay start offsets of %s: %s", start.topic, start.offsets)
        return start.model_dump(mode="json")

    def _noted_journal(self) -> JournalPosition | None:
        """Where this window's memory journal stood when the pre-copy began reading, or None (no journal, no
        pre-copy, or one that noted another journal or none)."""
        noted = self._precopy.journal if self._precopy is not None else None
        return noted if noted is not None and noted.topic == self.memory_journal_topic else None

    def _journal(self, hook: FlinkRestHook, quiesce: QuiesceResult) -> MemoryJournalHook | None:
        """Production's memory journal when the cut may trust it, else None (the cut reads the whole namespace).

        Trusted when the pre-copy noted its position, and the job stopped now is the one that ran since the
        pre-copy and did not fail over meanwhile: a memory write whose journal record was never sent is one whose
        process died between the store and the broker, which Flink records as a failure in the job's exception
        history (and a job started after the pre-copy replaced one whose end the window did not see).
        """
        noted = self._noted_journal()
        if noted is None:
            return None
        since_ms = int(datetime.fromisoformat(noted.noted_at).timestamp() * 1000) - CLOCK_MARGIN_MS
        try:
            started = hook.get_job(quiesce.job_id).start_time
            failures = [e.timestamp for e in hook.get_exceptions(quiesce.job_id).exception_history.entries
                        if e.timestamp >= since_ms]  # fmt: skip
        except Exception as exc:
            why = f"Flink did not tell ({type(exc).__name__}: {exc})"
        else:
            why = (f"production failed over {len(failures)} time(s) since the pre-copy" if failures
                   else "production's job started after the pre-copy" if started > since_ms else "")  # fmt: skip
        if why:
            self.log.warning("memory journal not trusted for this cut: %s; reading the whole namespace", why)
            return None
        return self.journal_hook

    def _cut_memory(
        self, hook: FlinkRestHook, quiesce: QuiesceResult, mark_read: Callable[[], None] | None = None
    ) -> dict[str, Any] | None:
        """The memory cut; ``mark_read`` runs once it read production's namespace for the last time (its writes
        into the fork and the markers follow: they touch no memory production can change)."""
        if self.memory_source is None or self.memory_target is None:
            return None
        source = Mem0Namespace.coerce(self.memory_source, what="memory_source")
        target = Mem0Namespace.coerce(self.memory_target, what="memory_target")
        journal = self._journal(hook, quiesce)
        try:
            result = self.mem0_hook.fork(source, target, fork_id=str(self.fork_id), journal=journal,
                                         on_source_read=mark_read)
        finally:
            if journal is not None:
                journal.close()
        self.log.info(
            "memory cut %s → %s: %d memories in %.3f s%s",
            source,
            target,
            result.count,
            result.duration_s,
            f" (delta since the pre-copy: {result.added} added, {result.updated} updated, {result.removed} removed"
            f"{', found in the memory journal' if result.journal else ''})"
            if result.delta
            else " (full copy)",
        )
        return result.model_dump(mode="json")

    def _resume(
        self, context: Any, hook: FlinkRestHook, quiesce: QuiesceResult, name: str, steps: dict[str, float]
    ) -> ResumeResult:
        program = FlinkPythonProgram.model_validate(self.program)
        started = time.monotonic()
        try:
            submitted = resubmit_production(
                hook,
                program,
                savepoint=quiesce.savepoint_path,
                name=name,
                submitter=self.submitter,
                timeout=self.resume_timeout,
            )
            steps["resubmit"] = round(time.monotonic() - started, 3)
            started = time.monotonic()
            running = hook.wait_for_job_state(
                submitted.job_id, ("RUNNING",), timeout=self.resume_timeout, poll_interval=0.1, all_tasks_running=True
            )
        except FlinkRestError as err:
            raise AirflowException(
                f"Resubmitting production from {quiesce.savepoint_path} inside the stop window failed: {err}. "
                "The resume_production task retries it (and reattaches to a job this try submitted)"
            ) from err
        steps["running"] = round(time.monotonic() - started, 3)
        result = ResumeResult(
            job_id=submitted.job_id,
            job_name=name,
            savepoint_path=quiesce.savepoint_path,
            submitted_at=submitted.submitted_at,
            running_at=self._running_at(hook, running),
            stopped_at=quiesce.requested_at,
            submitter=submitted.submitter,
            reattached=False,
        )
        self.log.info(
            "Production job %s RUNNING again after %.2f s of downtime (steps: %s)",
            submitted.job_id, result.downtime_seconds, steps,
        )  # fmt: skip
        return result

    def _running_at(self, hook: FlinkRestHook, job: Any) -> datetime:
        """When every task of the resumed job RAN, by Flink's timestamps (a poll sees it up to the REST cache's
        ``web.refresh-interval`` late); now when Flink's answer is missing or not earlier."""
        seen = datetime.now(UTC)
        try:
            since = hook.all_running_since(job)
        except FlinkRestError as err:
            self.log.warning("when production's tasks started running could not be read (%s): using now", err)
            return seen
        return since if since is not None and since <= seen else seen

    def _old_job_end(self, hook: FlinkRestHook, job_id: str) -> datetime | None:
        """The stopped job's end time (its teardown overlapped with the window; usually over by now)."""
        try:
            job = hook.get_job(job_id)
        except FlinkRestError:
            return None
        return flink_time(job.end_time)

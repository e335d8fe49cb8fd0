"""Production's whole stop window as one procedure: once the stop's savepoint completed, read the capture end
offsets, take the memory cut, resubmit production, wait until RUNNING.

A replay run stops production once. Everything that must happen while it is stopped used to be a task of
its own (quiesce → start offsets → baseline fork → resume), so the downtime included the executor's
latency between them: a second or two per task under the LocalExecutor, 10 to 30 s per pod under the
KubernetesExecutor. :class:`ProductionStopWindow` does all of it inside the quiesce task
(``StopWindowOperator``, ``operators/stop_window.py``, which never defers), so nothing scheduling does can land
inside the window.

What does not need production stopped stays outside: the memory pre-copy (before), the copies of the
baseline's fork for the other variants, the capture window and the manifest (after). The old job's
Python teardown overlaps with the cut and the resubmission: the offsets and production's memory are final once
the stop's savepoint completes (drain: every in-flight agent run ended before the barrier; no source emits after
it).

Production always comes back: a failure of the offsets or the memory cut still resumes production
inside the window; the window's result then carries the error, and :func:`raise_if_failed` refuses to go on
(no retry: the savepoint instant cannot be cut again once production runs). A failure of the resubmission itself
raises :class:`~airflow_flink_replay.exceptions.LifecycleError` (a retry), and the DAG's ``resume_production``
task (``all_done``) reattaches or resubmits in any case.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_flink_replay.core.flink_models import (
    LIVE_STATES,
    FlinkPythonProgram,
    JobDetails,
    QuiesceResult,
    ResumeResult,
    StopWindow,
)
from airflow_flink_replay.core.memory_fork import JournalPosition, Mem0Namespace, PrecopyManifest
from airflow_flink_replay.exceptions import FlinkRestError, LifecycleError, LifecycleRefusedError
from airflow_flink_replay.lifecycle.quiesce import flink_time
from airflow_flink_replay.lifecycle.resume import resubmit_production
from airflow_flink_replay.lifecycle.start_offsets import read_start_offsets

if TYPE_CHECKING:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
    from airflow_flink_replay.hooks.flink_submit import SubmitterKind
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.memory.journal_reader import MemoryJournalHook

__all__ = ["CLOCK_MARGIN_MS", "OVERLAP_MAX_MEMORIES", "ProductionStopWindow", "raise_if_failed"]

#: The largest pre-copy whose delta cut the resubmission overlaps by default (``overlap_resume=None``).
OVERLAP_MAX_MEMORIES = 20_000
#: Milliseconds of clock difference between Airflow's worker and Flink's JobManager the window allows for: a
#: failure or a job start this close before the pre-copy counts as after it (the journal check), a task RUNNING
#: this close after the cut's last read of production counts as before it (the fence).
CLOCK_MARGIN_MS = 1_000
_log = logging.getLogger(__name__)


def raise_if_failed(done: QuiesceResult) -> None:
    """Refuse to go on after a window whose offsets or memory cut failed (production was resumed all the same).

    :raises LifecycleRefusedError: the window's error, where production runs again, and what to do.
    """
    window = done.window
    if window is None or not window.error:
        return
    resumed = window.resumed
    raise LifecycleRefusedError(
        f"The stop window of production job {done.job_id} failed: {window.error}. Production was "
        f"resumed from {done.savepoint_path} as job {resumed.job_id if resumed else '?'} "
        f"after {resumed.downtime_seconds if resumed else None} s of downtime; this run's replay cannot go on (the "
        "savepoint instant cannot be cut again once production runs): fix the cause and run the replay again"
    )


@dataclass
class ProductionStopWindow:
    """Everything production's stop needs while it is stopped (see the module's docstring).

    :param flink: the Flink REST hook.
    :param program: how to resubmit production.
    :param capture_topic: the capture topic whose end offsets become the replay's start offsets.
    :param kafka: production's Kafka (the capture, output and cassette topics); closed after the offsets are read.
    :param offsets_before: the capture topic's end offsets read before the stop (``RecordStartOffsetsOperator``).
    :param output_topic: production's output topic: its end offsets are read too (the fidelity figure's start).
    :param cassette_topic: production's cassette topic: its end offsets are read too (the replays' cassette start).
    :param memory: the Mem0 hook of the cut (None, or no ``memory_source``/``memory_target``: no memory cut).
    :param memory_source: production's memory namespace.
    :param memory_target: the baseline's fork namespace; a pre-copy of the same ``fork_id`` there makes the cut a
        delta.
    :param journal: production's memory journal (its topic: ``production.memory_journal_topic``): when the
        pre-copy noted its position and production did not fail over since, the cut reads only the memories the
        journal names since (:meth:`trusted_journal`); else it reads the whole namespace.
    :param fork_id: the fork's identity.
    :param job_name: production's job name (default: the quiesce's).
    :param resume_timeout: seconds the resubmission and the wait until RUNNING may take.
    :param overlap_resume: start production's resubmission as soon as the window opens, while the offsets and
        the memory cut are taken (checked by :meth:`fence`); None: :meth:`choose_overlap` decides.
    :param inside: runs inside the window after the offsets and before the memory cut (a seam for checks).
    :param log: where the steps are logged (the task's log).
    """

    flink: FlinkRestHook
    program: FlinkPythonProgram
    capture_topic: str
    kafka: KafkaOffsetsHook
    offsets_before: Any = None
    output_topic: str | None = None
    cassette_topic: str | None = None
    memory: Mem0Hook | None = None
    memory_source: Any = None
    memory_target: Any = None
    journal: MemoryJournalHook | None = None
    fork_id: str = ""
    job_name: str | None = None
    submitter: SubmitterKind = "rest"
    resume_timeout: float = 300.0
    overlap_resume: bool | None = None
    inside: Callable[[QuiesceResult], None] | None = None
    log: Any = _log
    #: the pre-copy found in ``memory_target`` before the stop (:meth:`connect_before_stop`)
    precopy: PrecopyManifest | None = field(default=None, init=False)

    @property
    def cuts_memory(self) -> bool:
        """The window takes a memory cut."""
        return self.memory is not None and self.memory_source is not None and self.memory_target is not None

    # ---------------------------------------------------------------------------------- before the stop
    def connect_before_stop(self) -> None:
        """Connect to the memory store first (mem0's import and the store client take seconds in a fresh task
        process: not inside production's downtime), read the pre-copy, and connect to the journal it noted."""
        if not self.cuts_memory or self.memory is None:
            return
        started = time.monotonic()
        try:
            self.memory.connect()
            self.precopy = self.memory.read_precopy(self.memory_target, with_snapshot=True)
        except Exception as exc:  # the cut inside the window fails the same way and production comes back
            self.log.warning("memory store not reachable before the stop (%s: %s)", type(exc).__name__, exc)
        else:
            self.log.info("memory store client ready in %.2f s, before the stop", time.monotonic() - started)
        if self.noted_journal() is not None and self.journal is not None:
            try:  # the consumer connected and the journal's partitions known before the stop
                self.journal.ready()
            except Exception as exc:  # the cut reads it inside the window and fails there the same way
                self.log.warning("memory journal not reachable before the stop (%s: %s)", type(exc).__name__, exc)

    def choose_overlap(self) -> bool:
        """Whether production's resubmission overlaps the memory cut (``overlap_resume`` None): when the cut is
        short — no memory cut, a delta over a pre-copy of at most ``OVERLAP_MAX_MEMORIES`` memories (the delta
        reads the whole namespace again: ~1.5 s per 10k here, against ~7 s from resubmission to RUNNING), or a
        delta found in production's memory journal (it reads only what production wrote since the pre-copy)."""
        cut, pre, journaled = self.cuts_memory, self.precopy, self.noted_journal() is not None
        self.overlap_resume = not cut or journaled or (pre is not None and pre.count <= OVERLAP_MAX_MEMORIES)
        why = ("no cut" if not cut else "no pre-copy" if pre is None
               else f"pre-copy of {pre.count} memories{', journaled' if journaled else ''}")  # fmt: skip
        self.log.info("production's resubmission %s the memory cut (%s)",
                      "overlaps" if self.overlap_resume else "follows", why)  # fmt: skip
        return self.overlap_resume

    # -------------------------------------------------------------------------------------- the window
    def run(self, quiesce: QuiesceResult, *, retried: bool = False) -> QuiesceResult:
        """Offsets, memory cut, resubmission, RUNNING: production is stopped from the first step to the last.
        Returns ``quiesce`` with its ``window`` (whose ``error`` names a failed step: :func:`raise_if_failed`).

        :raises LifecycleRefusedError: a retry after an earlier try resumed production (the window closed).
        :raises LifecycleError: the resubmission failed (``resume_production`` retries it).
        """
        name = self.job_name or quiesce.job_name
        if retried:
            self.refuse_closed_window(name, quiesce)
        window = self._steps(quiesce, name)
        ended = self.old_job_end(quiesce.job_id)
        return quiesce.model_copy(update={"window": window, "job_stopped_at": quiesce.job_stopped_at or ended})

    def _steps(self, quiesce: QuiesceResult, name: str) -> StopWindow:
        """The window's steps; whatever fails (or interrupts) inside it, production is resumed before going."""
        steps = {"savepoint": round((quiesce.savepoint_completed_at - quiesce.requested_at).total_seconds(), 3)}
        offsets = cut = None
        error: str | None = None
        interrupted: BaseException | None = None
        resuming = self.start_resume(quiesce, name, steps) if self.overlap_resume else None
        read_at: list[datetime] = []

        def mark_read() -> None:  # the last read of what production wrote (offsets, memory): the fence's instant
            if not read_at:
                read_at.append(datetime.now(UTC))

        try:
            started = time.monotonic()
            offsets = self.read_offsets(quiesce)
            steps["offsets"] = round(time.monotonic() - started, 3)
            if self.inside is not None:
                self.inside(quiesce)
            started = time.monotonic()
            cut = self.cut_memory(quiesce, mark_read)
            if cut is not None:
                steps["memory_cut"] = round(time.monotonic() - started, 3)
            mark_read()
            if resuming is not None:
                self.fence(name, quiesce, read_at[0])
        except Exception as exc:  # production comes back first; the task fails after
            error = f"{type(exc).__name__}: {exc}"
            self.log.error("Inside the stop window: %s; resuming production first", error)
        except BaseException as exc:  # killed: still bring production back before going
            interrupted = exc
            error = f"interrupted ({type(exc).__name__})"
        resumed = resuming.result() if resuming is not None else self.resume(quiesce, name, steps)
        if interrupted is not None:
            raise interrupted
        return StopWindow(start_offsets=offsets, memory_cut=cut, resumed=resumed, error=error, steps_s=steps)

    def refuse_closed_window(self, name: str, quiesce: QuiesceResult) -> None:
        """A retry after an earlier try resumed production: the cut would no longer be the savepoint's."""
        live = [j.jid for j in self.flink.list_jobs().by_name(name, states=LIVE_STATES) if j.jid != quiesce.job_id]
        if live:
            raise LifecycleRefusedError(
                f"The stop window of this run already closed: production {name!r} runs again as job {live[0]} "
                f"(resumed from {quiesce.savepoint_path} by an earlier try). The capture offsets and the memory "
                "cut of the savepoint instant cannot be taken again while production runs; run the replay again"
            )

    def read_offsets(self, quiesce: QuiesceResult) -> dict[str, Any]:
        """The replay's start offsets (:func:`~.start_offsets.read_start_offsets`), as JSON."""
        try:
            start = read_start_offsets(
                self.kafka, self.capture_topic, quiesce.model_dump(mode="json"), self.offsets_before,
                self.output_topic, self.cassette_topic,
            )  # fmt: skip
        finally:
            self.kafka.close()
        self.log.info("replay start offsets of %s: %s", start.topic, start.offsets)
        return start.model_dump(mode="json")

    # ---------------------------------------------------------------------------------- the memory cut
    def noted_journal(self) -> JournalPosition | None:
        """Where this window's memory journal stood when the pre-copy began reading, or None (no journal, no
        pre-copy, or one that noted another journal or none)."""
        noted = self.precopy.journal if self.precopy is not None else None
        topic = self.journal.topic if self.journal is not None else None
        return noted if noted is not None and noted.topic == topic else None

    def trusted_journal(self, quiesce: QuiesceResult) -> MemoryJournalHook | None:
        """Production's memory journal when the cut may trust it, else None (the cut reads the whole namespace).

        Trusted when the pre-copy noted its position, and the job stopped now is the one that ran since the
        pre-copy and did not fail over meanwhile: a memory write whose journal record was never sent is one whose
        process died between the store and the broker, which Flink records as a failure in the job's exception
        history (and a job started after the pre-copy replaced one whose end the window did not see).
        """
        noted = self.noted_journal()
        if noted is None:
            return None
        since_ms = int(datetime.fromisoformat(noted.noted_at).timestamp() * 1000) - CLOCK_MARGIN_MS
        try:
            started = self.flink.get_job(quiesce.job_id).start_time
            failures = [e.timestamp for e in self.flink.get_exceptions(quiesce.job_id).exception_history.entries
                        if e.timestamp >= since_ms]  # fmt: skip
        except Exception as exc:
            why = f"Flink did not tell ({type(exc).__name__}: {exc})"
        else:
            why = (f"production failed over {len(failures)} time(s) since the pre-copy" if failures
                   else "production's job started after the pre-copy" if started > since_ms else "")  # fmt: skip
        if why:
            self.log.warning("memory journal not trusted for this cut: %s; reading the whole namespace", why)
            return None
        return self.journal

    def cut_memory(self, quiesce: QuiesceResult, mark_read: Callable[[], None] | None = None) -> dict[str, Any] | None:
        """The memory cut; ``mark_read`` runs once it read production's namespace for the last time (its writes
        into the fork and the markers follow: they touch no memory production can change)."""
        if not self.cuts_memory or self.memory is None:
            return None
        source = Mem0Namespace.coerce(self.memory_source, what="memory_source")
        target = Mem0Namespace.coerce(self.memory_target, what="memory_target")
        journal = self.trusted_journal(quiesce)
        try:
            result = self.memory.fork(source, target, fork_id=str(self.fork_id), journal=journal,
                                      on_source_read=mark_read)  # fmt: skip
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

    # --------------------------------------------------------------------------------- the resubmission
    def start_resume(self, quiesce: QuiesceResult, name: str, steps: dict[str, float]) -> Future[ResumeResult]:
        """Production's resubmission, started now on a thread of its own (its result or error: ``.result()``)."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="afr-resume")
        try:
            return pool.submit(self.resume, quiesce, name, steps)
        finally:
            pool.shutdown(wait=False)

    def fence(self, name: str, quiesce: QuiesceResult, read_at: datetime) -> None:
        """Check that no task of production's resumed job RAN before ``read_at``, when the offsets and the memory
        cut had read what production wrote (before the cut writes its fork): a task processes
        records only once it RUNS, so nothing production did after the savepoint is in what they read.

        Flink's REST API serves job states from a cache up to ``web.refresh-interval`` old, so the check waits
        until that long after ``read_at`` (the cut's writes overlap the wait), then compares the subtasks' own
        RUNNING timestamps with ``read_at`` (a JobManager clock up to ``CLOCK_MARGIN_MS`` ahead counts
        as too early).

        :raises LifecycleError: a task already ran: the offsets or the cut may hold production's work after
            the savepoint (production is resumed all the same; this run's replay cannot go on).
        """
        cache_s = self.flink.rest_cache_seconds()
        wait = (read_at - datetime.now(UTC)).total_seconds() + cache_s
        if wait > 0:
            time.sleep(wait)
        latest_ok = read_at + timedelta(milliseconds=CLOCK_MARGIN_MS)
        for listed in self.flink.list_jobs().by_name(name, states=LIVE_STATES):
            if listed.jid == quiesce.job_id:
                continue
            job = self.flink.get_job(listed.jid)
            running = [v.name for v in job.vertices if v.processing]
            first = self.flink.first_running_at(job) if running else None
            if running and (first is None or first <= latest_ok):
                raise LifecycleError(
                    f"production's resumed job {listed.jid} was already running ({', '.join(running)}"
                    f"{f' since {first.isoformat()}' if first else ''}) when the offsets and the memory cut had "
                    f"read production's state (at {read_at.isoformat()}): they may hold work done after the "
                    "savepoint. Fix: run the replay again; if it recurs (a slow memory cut), set overlap_resume=False"
                )

    def resume(self, quiesce: QuiesceResult, name: str, steps: dict[str, float]) -> ResumeResult:
        """Resubmit production from the window's savepoint and wait until every task RUNS.

        :raises LifecycleError: the resubmission or the wait failed (``resume_production`` retries it).
        """
        started = time.monotonic()
        try:
            submitted = resubmit_production(
                self.flink, self.program, savepoint=quiesce.savepoint_path, name=name, submitter=self.submitter,
                timeout=self.resume_timeout,
            )  # fmt: skip
            steps["resubmit"] = round(time.monotonic() - started, 3)
            started = time.monotonic()
            running = self.flink.wait_for_job_state(
                submitted.job_id, ("RUNNING",), timeout=self.resume_timeout, poll_interval=0.1, all_tasks_running=True
            )
        except FlinkRestError as err:
            raise LifecycleError(
                f"Resubmitting production from {quiesce.savepoint_path} inside the stop window failed: {err}. "
                "The resume_production task retries it (and reattaches to a job this try submitted)"
            ) from err
        steps["running"] = round(time.monotonic() - started, 3)
        result = ResumeResult(
            job_id=submitted.job_id,
            job_name=name,
            savepoint_path=quiesce.savepoint_path,
            submitted_at=submitted.submitted_at,
            running_at=self.running_at(running),
            stopped_at=quiesce.requested_at,
            submitter=submitted.submitter,
            reattached=False,
        )
        self.log.info(
            "Production job %s RUNNING again after %.2f s of downtime (steps: %s)",
            submitted.job_id, result.downtime_seconds, steps,
        )  # fmt: skip
        return result

    def running_at(self, job: JobDetails) -> datetime:
        """When every task of the resumed job RAN, by Flink's timestamps (a poll sees it up to the REST cache's
        ``web.refresh-interval`` late); now when Flink's answer is missing or not earlier."""
        seen = datetime.now(UTC)
        try:
            since = self.flink.all_running_since(job)
        except FlinkRestError as err:
            self.log.warning("when production's tasks started running could not be read (%s): using now", err)
            return seen
        return since if since is not None and since <= seen else seen

    def old_job_end(self, job_id: str) -> datetime | None:
        """The stopped job's end time (its teardown overlapped with the window; usually over by now)."""
        try:
            job = self.flink.get_job(job_id)
        except FlinkRestError:
            return None
        return flink_time(job.end_time)

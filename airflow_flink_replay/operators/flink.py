"""Step 2 (quiesce + savepoint) and step 4 (resume) of the chain: the operators that wire production's
lifecycle procedures (:mod:`airflow_flink_replay.lifecycle`: ``quiesce``, ``resume``).

``QuiesceAndSavepointOperator`` (modes ``drain`` | ``stop`` | ``savepoint``) and ``ResumeJobOperator``.
Both are deferrable (Databricks-provider style: ``deferrable`` defaults to ``[operators]
default_deferrable``, ``defer()`` to a trigger, finish in ``execute_complete``) and idempotent on retry: the
deterministic trigger ids and the reattach rules are the procedures' (:class:`~.lifecycle.quiesce.Quiesce`,
:class:`~.lifecycle.resume.Resume`). An operator reads its arguments, builds its procedure, waits (in the
triggerer when deferrable, else in the task), links the Flink job page, holds production's lease and pushes
the typed result; a procedure's error becomes Airflow's with the same message (:func:`as_task_failure`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any, NamedTuple

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_flink_replay.core.flink_models import AGENT_OPERATOR_NAME, FlinkPythonProgram, QuiesceResult, ResumeResult
from airflow_flink_replay.exceptions import LifecycleError, LifecycleRefusedError, NothingToResume
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.hooks.flink_submit import SubmitterKind
from airflow_flink_replay.lifecycle.quiesce import (
    MODES,
    Quiesce,
    QuiesceCarry,
    SavepointOperation,
    TaskRun,
    operation_name,
    operation_trigger_id,
    operation_trigger_ids,
    run_path_segment,
    savepoint_of_run,
)
from airflow_flink_replay.lifecycle.resume import Resume, ResumeCarry, check_something_to_resume
from airflow_flink_replay.links.flink import FlinkJobLink
from airflow_flink_replay.operators.production_lease import LeaseSettings, RunLease, run_lease
from airflow_flink_replay.triggers.flink import FlinkAsyncOperationTrigger, FlinkJobStateTrigger

#: With the operators, the lifecycle's names that other modules import from here (``production_check``, tests).
__all__ = [
    "MODES",
    "QuiesceAndSavepointOperator",
    "QuiesceCarry",
    "QuiesceRef",
    "Resubmission",
    "ResumeCarry",
    "ResumeJobOperator",
    "as_task_failure",
    "operation_trigger_id",
    "operation_trigger_ids",
    "run_path_segment",
    "savepoint_of_run",
]


@contextlib.contextmanager
def as_task_failure() -> Iterator[None]:
    """Turn a lifecycle procedure's error into Airflow's, with the same message: nothing to resume skips the
    task, a refusal fails it without retrying, any other lifecycle error fails it for a retry."""
    try:
        yield
    except NothingToResume as nothing:
        raise AirflowSkipException(str(nothing)) from nothing.__cause__
    except LifecycleRefusedError as refused:
        raise AirflowFailException(str(refused)) from refused.__cause__
    except LifecycleError as err:
        raise AirflowException(str(err)) from err.__cause__


class QuiesceAndSavepointOperator(BaseOperator):
    """Takes production's savepoint: ``drain`` (stop with drain), ``stop`` (stop, no drain) or ``savepoint``.

    - ``drain``: ``POST /jobs/{id}/stop {"drain": true}``. Sources stop, MAX_WATERMARK flows and every
      operator finishes (end of input): the Flink Agents operator completes all in-flight runs, event-time
      timers fire, buffers flush. The savepoint holds no in-flight work; production is stopped.
    - ``stop``: stop-with-savepoint without drain; production stopped. No MAX_WATERMARK: event-time timers
      do not fire, so the work waiting on them stays in the savepoint. Flink 2.x still finishes every
      operator and runs its mailbox empty first, which (found with Flink Agents 0.2.0) completes the agent
      operator's in-flight runs too; ``drain`` is the mode that guarantees it (``endInput``).
    - ``savepoint``: ``POST /jobs/{id}/savepoints``; production keeps running (no downtime); the result
      says in-flight work may be inside.

    A failed or timed-out savepoint fails the task with Flink's cause; it never falls back to a
    checkpoint. Pushes a :class:`QuiesceResult` (``model_dump(mode="json")``) as return value.

    :param job_id: production's Flink job id (templated).
    :param mode: ``drain`` | ``stop`` | ``savepoint`` (templated).
    :param target_directory: savepoint base directory (templated); default: the cluster's
        ``execution.checkpointing.savepoint-dir``. The savepoint goes to ``<base>/<dag_id>/<run_id>``.
    :param format_type: ``CANONICAL`` (portable; default) or ``NATIVE``.
    :param timeout: seconds the savepoint/stop may take.
    :param poll_interval: seconds between REST polls.
    :param agent_operator_name: marks the agent vertex in the recorded plan.
    :param wait_for_finished: in drain/stop modes, return only once the job is FINISHED (default). Flink
        reports the stop's savepoint COMPLETED while the job still tears down (~2.5 s for Python workers);
        waiting makes "production stopped" mean every task ended and every sink committed. ``False``
        returns at savepoint completion (shorter downtime when resume follows directly; ``job_stopped_at``
        is then only set if the job had already finished).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param lease: production's lease (:class:`~.production_lease.LeaseSettings`; its folder templated). Given, the
        task takes production's lease (:mod:`~airflow_flink_replay.core.production_lease`) before it touches
        production, waiting up to ``lease.wait`` seconds while another run holds it, then failing with nothing
        touched. ``savepoint`` mode releases it once the savepoint is taken; ``drain``/``stop`` keep it for the
        resume (the stop window, ``resume_production``) or ``assert_production`` to release. None: no lease.
    """

    template_fields: Sequence[str] = ("job_id", "mode", "target_directory", "lease")
    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        job_id: str,
        mode: str = "drain",
        target_directory: str | None = None,
        format_type: str = "CANONICAL",
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 600.0,
        poll_interval: float = 0.5,
        agent_operator_name: str = AGENT_OPERATOR_NAME,
        wait_for_finished: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        lease: LeaseSettings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.lease = lease
        self._lease: RunLease | None = None
        self._procedure: Quiesce | None = None
        self.job_id = job_id
        self.mode = mode
        self.target_directory = target_directory
        self.format_type = format_type.upper()
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self.agent_operator_name = agent_operator_name
        self.wait_for_finished = wait_for_finished
        self.deferrable = deferrable
        if self.format_type not in ("CANONICAL", "NATIVE"):
            raise ValueError(f"format_type must be CANONICAL or NATIVE, got {format_type!r}")

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook."""
        return FlinkRestHook(self.flink_conn_id)

    @property
    def operation(self) -> str:
        """Human name of the Flink operation of this mode."""
        return operation_name(self.mode)

    def _quiesce(self, context: Any) -> Quiesce:
        """This task instance's quiesce procedure (built once)."""
        if self._procedure is None:
            self._procedure = Quiesce(
                self.hook, self.job_id, self.mode, TaskRun.of(context), target_directory=self.target_directory,
                format_type=self.format_type, timeout=self.timeout, poll_interval=self.poll_interval,
                agent_operator_name=self.agent_operator_name, wait_for_finished=self.wait_for_finished,
                flink_conn_id=self.flink_conn_id, log=self.log,
            )  # fmt: skip
        return self._procedure

    def execute(self, context: Any) -> Any:
        """Take production's lease (with ``lease``), then quiesce; a failure before production was touched
        releases the lease."""
        if self.mode not in MODES:
            raise AirflowException(f"QuiesceAndSavepointOperator.mode must be one of {MODES}, got {self.mode!r}")
        quiesce = self._quiesce(context)
        job = self.hook.get_job(self.job_id)  # FlinkJobNotFoundError names an unknown id
        lease = self._production_lease(context, job.name)
        with as_task_failure():
            if lease is None:
                return self._start(context, quiesce, job)
            wait_s = float(self.lease.wait) if self.lease is not None else 0.0
            lease.acquire(wait_s=wait_s, job_id=self.job_id)  # fails here, touching nothing, if still held
            try:
                with lease.heartbeat():
                    job = quiesce.job_after_lease_wait(job, lease)
                    self.job_id = quiesce.job_id
                    return self._start(context, quiesce, job)
            except BaseException:
                if not quiesce.touched:
                    lease.release(why="this task failed before it stopped or savepointed production")
                raise

    def _production_lease(self, context: Any, job_name: str | None) -> RunLease | None:
        """This task's hold on production's lease (created once), None without ``lease``."""
        if self._lease is None:
            name = getattr(self, "job_name", None) or job_name  # the stop window's production.job_name
            self._lease = run_lease(self.log, context, self.lease, flink_url=self.hook.base_url, job_name=name)
        return self._lease

    def _start(self, context: Any, quiesce: Quiesce, job: Any) -> Any:
        """Link production's job, then trigger (or reattach to) this run's savepoint/stop and wait for it."""
        FlinkJobLink.persist(context, self.hook.job_ui_url(self.job_id, job.state))
        operation = quiesce.start(job)
        if operation.location is None:
            if self.deferrable:
                self.defer(
                    trigger=FlinkAsyncOperationTrigger(
                        job_id=self.job_id,
                        request_id=operation.trigger_id,
                        operation=self.operation,
                        flink_conn_id=self.flink_conn_id,
                        timeout=self.timeout,
                        poll_interval=self.poll_interval,
                        carry=dict(operation.carry()),
                    ),
                    method_name="execute_complete",
                )
            operation = quiesce.wait(operation)
        return self._finish(context, operation)

    def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
        """Finish after the trigger: fail with Flink's cause, or build the result.

        What ``execute`` knew travels in ``event["carry"]`` (dag.test() drops deferral kwargs).
        """
        if event.get("status") != "success":
            raise AirflowException(event.get("message") or f"Flink {self.operation} failed: {event}")
        carry = {**event.get("carry", {}), **kwargs}
        completed_at = datetime.fromisoformat(event["completed_at"])
        return self._finish(context, SavepointOperation.completed(carry, location=str(event["location"]),
                                                                  completed_at=completed_at))  # fmt: skip

    def _finish(self, context: Any, operation: SavepointOperation) -> dict[str, Any]:
        """The result of the completed ``operation``: link the job's page, release the lease when production kept
        running, push the :class:`QuiesceResult`."""
        quiesced = self._quiesce(context).finish(operation)
        if quiesced.job_state is not None:
            # the web UI shows an ended job under #/job/completed/ only: link the page that exists now
            FlinkJobLink.persist(context, self.hook.job_ui_url(self.job_id, quiesced.job_state))
        result = quiesced.result
        if not result.production_stopped:  # production kept running: nothing for a resume to do
            self._release_lease(context, result.job_name, savepoint=result.savepoint_path,
                                why="savepoint taken, production ran on")  # fmt: skip
        return result.model_dump(mode="json")

    def _release_lease(self, context: Any, job_name: str | None, *, savepoint: str | None, why: str) -> None:
        """Release production's lease (with ``lease``), pushing it as this task left it (XCom ``lease``)."""
        lease = self._production_lease(context, job_name)
        if lease is not None and (done := lease.release(savepoint=savepoint, why=why)) is not None:
            lease.push(done.summary())

    def on_kill(self) -> None:
        """Flink cannot abort a savepoint or undo a stop over REST; the trigger id lets a retry reattach."""
        self.log.warning(
            "Killed while waiting for the %s of job %s; Flink finishes it on its own and a retry of this "
            "task reattaches to it (same trigger id) instead of stopping twice",
            self.operation,
            self.job_id,
        )


class QuiesceRef(NamedTuple):
    """The quiesce a later task answers for (the resume, the production check), as the DAG run knows it. The replay
    DAG builds one and passes it to both.

    A NamedTuple because its members are templated (XComArgs in the DAG): Airflow renders a tuple's members into a
    new tuple of the same class and finds the XComArgs inside it (they make the quiesce and the preflight upstream).

    :param result: the quiesce task's result (``quiesce.output``; a :class:`QuiesceResult` or its JSON): the
        savepoint, the job name and the stop time. None when the quiesce left none (it failed, timed out or was
        killed, maybe while Flink was still stopping the job).
    :param mode: the run's quiesce mode. ``existing`` (an earlier savepoint is replayed, production was never
        stopped): nothing to resume, nothing to assert. With ``task_id`` it gives the trigger ids of this run's stop.
    :param production_job_id: production's Flink job id as it was before the quiesce (preflight's): how this run's
        stop is found when ``result`` is missing.
    :param task_id: the quiesce's task id (its trigger ids find this run's stop).
    """

    result: Mapping[str, Any] | QuiesceResult | None = None
    mode: str | None = None
    production_job_id: str | None = None
    task_id: str = "quiesce"

    def as_json(self) -> QuiesceRef:
        """This reference with ``result`` as JSON (a model given at DAG time is kept as its JSON, as XCom holds it)."""
        if isinstance(self.result, QuiesceResult):
            return self._replace(result=self.result.model_dump(mode="json"))
        return self

    def quiesce_result(self) -> QuiesceResult | None:
        """``result`` read (None without one)."""
        return QuiesceResult.model_validate(self.result) if self.result else None


class Resubmission(NamedTuple):
    """How the resume submits production again (``savepoint_path`` templated).

    :param savepoint_path: the savepoint to restore (overrides the quiesce result's).
    :param submitter: ``rest`` (default) or ``cli``.
    :param allow_non_restored_state: skip state that maps to no operator (``-n``). Off by default: a production
        restore should restore everything.
    """

    savepoint_path: str | None = None
    submitter: SubmitterKind = "rest"
    allow_non_restored_state: bool = False


class ResumeJobOperator(BaseOperator):
    """Resubmits production from a savepoint, waits until it RUNS again and reports the downtime.

    Meant for ``trigger_rule="all_done"`` (the default here) so production comes back even when a task
    between stop and resume failed, and for retries with backoff (every step is idempotent). Resubmission
    goes through a :class:`FlinkJobSubmitter` (REST by default) whose metaspace guard is off for it:
    bringing production back wins (the quiesce checks the headroom before it stops anything).
    Idempotent: a job with production's name other than the stopped one (an earlier try's resubmission) is
    reattached to; a stopped job that still RUNS once this run's stop is no longer in flight is reattached
    to; if the quiesce never stopped production (``savepoint`` mode), nothing is submitted.

    :param program: how to submit production (:class:`FlinkPythonProgram` or its dict; templated).
    :param quiesce: the quiesce this resume answers for (:class:`QuiesceRef`, templated; None: none known): its
        result gives the
        savepoint, the job name and the stop time for the downtime. Without a result (the quiesce task failed,
        timed out or was killed, maybe while Flink was still stopping the job), resume waits until the stop this
        run triggered (found by its deterministic trigger ids: ``production_job_id``, ``mode``, ``task_id``) is no
        longer in flight, then reattaches to that job if it still RUNS (the stop failed), or resubmits from the
        savepoint the stop produced (found by the operation, or in THIS run's quiesce directory); never from an
        older savepoint or a checkpoint. A RUNNING job with a stop in flight is not "running". Mode ``existing``
        skips this task, so production is never resubmitted by a run that did not stop it.
    :param job_name: production's job name (templated; default: the quiesce result's, else the program's).
    :param resubmission: how production is submitted again (:class:`Resubmission`: the savepoint, templated, the
        submitter, ``allow_non_restored_state``).
    :param timeout: seconds to wait until RUNNING.
    :param all_tasks_running: RUNNING means every vertex runs (records flow again), not only the job.
    :param cancel_on_kill: cancel the submitted job when the task is killed (off: production must stay up).
    :param stop_timeout: seconds to wait for this run's stop to end when it is still in flight.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param lease: production's lease (:class:`~.production_lease.LeaseSettings`). Given, a resume that may touch
        production holds production's lease: a run that never held it never stopped production (skipped); a lease
        another run holds now is that run's production to resume (fails, touching nothing); production verified
        RUNNING releases it.
    """

    template_fields: Sequence[str] = ("program", "quiesce", "job_name", "resubmission", "lease")
    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        program: FlinkPythonProgram | dict[str, Any],
        quiesce: QuiesceRef | None = None,
        job_name: str | None = None,
        resubmission: Resubmission | None = None,
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 300.0,
        poll_interval: float = 0.25,
        all_tasks_running: bool = True,
        cancel_on_kill: bool = False,
        stop_timeout: float = 900.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        lease: LeaseSettings | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.lease = lease
        self._lease: RunLease | None = None
        self.program = program.model_dump() if isinstance(program, FlinkPythonProgram) else program
        self.quiesce = (quiesce or QuiesceRef()).as_json()
        self.job_name = job_name
        self.resubmission = resubmission or Resubmission()
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self.all_tasks_running = all_tasks_running
        self.cancel_on_kill = cancel_on_kill
        self.stop_timeout = float(stop_timeout)
        self.deferrable = deferrable
        self._procedure: Resume | None = None

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook."""
        return FlinkRestHook(self.flink_conn_id)

    def _resume(self, context: Any) -> Resume:
        """This task instance's resume procedure (built once)."""
        if self._procedure is None:
            quiesce, again = self.quiesce, self.resubmission
            self._procedure = Resume(
                self.hook, FlinkPythonProgram.model_validate(self.program), TaskRun.of(context),
                quiesce=quiesce.quiesce_result(), savepoint_path=again.savepoint_path, job_name=self.job_name,
                production_job_id=quiesce.production_job_id, quiesce_mode=quiesce.mode, quiesce_task_id=quiesce.task_id,
                submitter=again.submitter, allow_non_restored_state=again.allow_non_restored_state,
                timeout=self.timeout, poll_interval=self.poll_interval, all_tasks_running=self.all_tasks_running,
                stop_timeout=self.stop_timeout, log=self.log,
            )  # fmt: skip
        return self._procedure

    def execute(self, context: Any) -> Any:
        """Reattach, or wait out this run's stop and submit from its savepoint; then wait until RUNNING."""
        with as_task_failure():
            check_something_to_resume(self.quiesce.mode, self.quiesce.result, self.quiesce.production_job_id,
                                      self.resubmission.savepoint_path)  # fmt: skip
            resume = self._resume(context)
            lease = self._production_lease(context, resume.name)
            if (in_window := resume.resumed_in_window()) is not None:
                return self._resumed(context, in_window, why="resumed in the window")
            if (running := resume.never_stopped()) is not None:
                return self._resumed(context, running)
            if lease is None:
                return self._wait(context, resume.bring_back())
            if (handed_over := resume.hold_lease(lease)) is not None:  # another run stopped it again since
                return handed_over.model_dump(mode="json")
            with lease.heartbeat():
                return self._wait(context, resume.bring_back())

    def _production_lease(self, context: Any, name: str | None) -> RunLease | None:
        """This task's hold on production's lease (created once), None without ``lease``."""
        if self._lease is None:
            self._lease = run_lease(self.log, context, self.lease, flink_url=self.hook.base_url, job_name=name)
        return self._lease

    def _release_lease(self, context: Any, name: str | None, *, savepoint: str | None, why: str) -> None:
        """Release production's lease (with ``lease``) once production RUNS, pushing it (XCom ``lease``)."""
        lease = self._production_lease(context, name)
        if lease is not None and (done := lease.release(savepoint=savepoint, why=why)) is not None:
            lease.push(done.summary())

    def _wait(self, context: Any, target: ResumeCarry) -> Any:
        """Wait until ``target``'s job RUNS: in the triggerer when deferrable, else here."""
        FlinkJobLink.persist(context, self.hook.job_ui_url(target["job_id"]))
        if self.deferrable:
            self.defer(
                trigger=FlinkJobStateTrigger(
                    job_id=target["job_id"],
                    target_states=["RUNNING"],
                    flink_conn_id=self.flink_conn_id,
                    timeout=self.timeout,
                    poll_interval=self.poll_interval,
                    all_tasks_running=self.all_tasks_running,
                    # a killed deferred task cancels the job only if it submitted it and was asked to
                    cancel_on_kill=self.cancel_on_kill and not target["reattached"],
                    carry=dict(target),
                ),
                method_name="execute_complete",
            )
        return self._resumed(context, self._resume(context).wait_until_running(target))

    def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
        """Finish after the trigger: fail with the job's cause, or build the result."""
        carry: Any = {**event.get("carry", {}), **kwargs}
        if event.get("status") != "success":
            raise AirflowException(
                event.get("message") or f"Resumed job {carry['job_id']} did not reach RUNNING: {event}"
            )
        job_name = carry["job_name"] or event.get("job", {}).get("name", "")
        running_at = datetime.fromisoformat(event["observed_at"])
        return self._resumed(context, self._resume(context).result(carry, running_at=running_at, job_name=job_name))

    def _resumed(self, context: Any, result: ResumeResult, *, why: str | None = None) -> dict[str, Any]:
        """Production RUNS: link its job's page, release production's lease, push the :class:`ResumeResult`."""
        FlinkJobLink.persist(context, self.hook.job_ui_url(result.job_id))
        self._release_lease(context, self.job_name or result.job_name, savepoint=result.savepoint_path,
                            why=why or f"job {result.job_id} RUNNING")  # fmt: skip
        return result.model_dump(mode="json")

    def on_kill(self) -> None:
        """Cancel the job this task submitted, only with ``cancel_on_kill`` (production should stay up)."""
        submitted = self._procedure.submitted_job_id if self._procedure is not None else None
        if self.cancel_on_kill and submitted:
            self.log.warning("Cancelling job %s submitted by this task", submitted)
            self.hook.cancel_job(submitted)

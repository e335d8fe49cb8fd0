"""Deferrable sensor for a Flink job state."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.links.flink import FlinkJobLink
from airflow_flink_replay.triggers.flink import FlinkJobStateTrigger

_FINAL = ("FAILED", "CANCELED", "FINISHED", "SUSPENDED")


class FlinkJobSensor(BaseSensorOperator):
    """Waits until a Flink job reaches one of ``target_states`` (FAILED/CANCELED fail it with the cause).

    :param job_id: the Flink job id (templated).
    :param target_states: states that end the wait, e.g. ``("RUNNING",)`` or ``("FINISHED",)``.
    :param all_tasks_running: for RUNNING, also wait until every vertex runs.
    :param flink_conn_id: the Flink REST connection.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param poll_interval: seconds between REST polls when deferred.
    """

    template_fields: Sequence[str] = ("job_id",)
    operator_extra_links = (FlinkJobLink(),)

    def __init__(
        self,
        *,
        job_id: str,
        target_states: Sequence[str] = ("RUNNING",),
        all_tasks_running: bool = False,
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.target_states = [s.upper() for s in target_states]
        self.all_tasks_running = all_tasks_running
        self.flink_conn_id = flink_conn_id
        self.deferrable = deferrable
        self.poll_interval_rest = poll_interval

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook."""
        return FlinkRestHook(self.flink_conn_id)

    def poke(self, context: Any) -> bool:
        """One ``GET /jobs/{id}``."""
        hook = self.hook
        job = hook.get_job(self.job_id)
        self.log.info("Flink job %s is %s (waiting for %s)", self.job_id, job.state, self.target_states)
        if job.state in self.target_states or job.state in _FINAL:
            FlinkJobLink.persist(context, hook.job_ui_url(self.job_id, job.state))  # an ended job's page moves
        if job.state in self.target_states:
            return job.state != "RUNNING" or not self.all_tasks_running or job.all_vertices_running
        if job.state in _FINAL:
            cause = hook.job_failure_cause(self.job_id)
            raise AirflowException(
                f"Flink job {self.job_id} ended {job.state} while waiting for {self.target_states}: "
                f"{cause or 'no exception recorded'}"
            )
        return False

    def execute(self, context: Any) -> Any:
        """Poke once; if not there yet and deferrable, defer to :class:`FlinkJobStateTrigger`."""
        hook = self.hook
        FlinkJobLink.persist(context, hook.job_ui_url(self.job_id))
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=FlinkJobStateTrigger(
                job_id=self.job_id,
                target_states=self.target_states,
                flink_conn_id=self.flink_conn_id,
                timeout=float(self.timeout),
                poll_interval=self.poll_interval_rest,
                all_tasks_running=self.all_tasks_running,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        """Return the reached state, or fail with the trigger's message."""
        if event.get("state"):
            hook = self.hook
            FlinkJobLink.persist(context, hook.job_ui_url(self.job_id, str(event["state"])))
        if event.get("status") != "success":
            raise AirflowException(event.get("message") or f"Flink job wait failed: {event}")
        return str(event["state"])

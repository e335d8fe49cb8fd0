"""``ReplayPreflightOperator``: fail fast, before production is touched, and name the fix."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_flink_replay.core.preflight import PreflightFindings, check_names, check_production
from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.exceptions import KafkaConnectionError, PreflightError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.ids import XCOM_JOB_ID_KEY, XCOM_PRODUCTION_DETAILS_KEY


def run_tag(context: Any) -> str:
    """A short, name-safe tag of the DAG run (used in fork namespaces and topic names)."""
    import hashlib

    run_id = context["run_id"]
    return hashlib.sha256(f"{context['dag'].dag_id}/{run_id}".encode()).hexdigest()[:10]


class ReplayPreflightOperator(BaseOperator):
    """Check production and the replay's names before anything is stopped or created.

    Refuses (fails the task, listing every problem with its fix) when: no single RUNNING job has
    production's name; its plan has no agent vertex; ``drain`` meets event-time windows; a production
    topic is missing; a replay topic or memory namespace would be production's. Returns production's job
    id (``XCOM_JOB_ID_KEY``), its job details (``XCOM_PRODUCTION_DETAILS_KEY``), the run tag and the
    warnings, each also under its own XCom key (``multiple_outputs``): ``preflight.output[XCOM_JOB_ID_KEY]``
    resolves to ``None``, not an error, in a task that runs although preflight did not (``all_done``).

    :param spec: the replay spec (a :class:`ReplaySpec` or its dict), already with the run's overrides.
    """

    template_fields: Sequence[str] = ("spec",)
    ui_color = "#fef7e0"

    def __init__(self, *, spec: ReplaySpec | dict[str, Any], **kwargs: Any) -> None:
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        self.spec = spec.model_dump(mode="json") if isinstance(spec, ReplaySpec) else spec

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook of the spec's (rendered) ``flink_conn_id``."""
        return FlinkRestHook(ReplaySpec.model_validate(self.spec).flink_conn_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Gather the facts and judge them (``core.preflight``)."""
        spec = ReplaySpec.model_validate(self.spec)
        tag = run_tag(context)
        findings, job_id = self._findings(spec, tag)
        for warning in findings.warnings:
            self.log.warning("%s", warning)
        try:
            findings.raise_if_any()
        except PreflightError as err:  # a finding a retry cannot change: fail without retrying
            raise AirflowFailException(str(err)) from err
        self.log.info("preflight passed: production %s (%s), run tag %s", spec.production.job_name, job_id, tag)
        details = self.hook._request("GET", f"/jobs/{job_id}", operation="production job details") if job_id else None
        return {
            XCOM_JOB_ID_KEY: job_id,
            XCOM_PRODUCTION_DETAILS_KEY: details,
            "job_name": spec.production.job_name,
            "run_tag": tag,
            "warnings": findings.warnings,
        }

    def _findings(self, spec: ReplaySpec, tag: str) -> tuple[PreflightFindings, str | None]:
        """What preflight found (the replay's names, then production: its RUNNING job, its plan, the topics), and
        production's job id (None when no RUNNING job has its name)."""
        findings = PreflightFindings()
        findings.problems += check_names(spec, tag).problems
        running = [(j.jid, j.name) for j in self.hook.list_jobs().jobs if j.state == "RUNNING"]
        job_id = next((jid for jid, name in running if name == spec.production.job_name), None)
        vertex_names = [v.name for v in self.hook.get_job(job_id).vertices] if job_id else None
        prod = check_production(spec, running, vertex_names, self._topics(spec))
        findings.problems += prod.problems
        findings.warnings += prod.warnings
        return findings, job_id

    def _topics(self, spec: ReplaySpec) -> set[str]:
        """Every topic's name, through the spec's Kafka connection; a broker that refuses the connection's
        credentials fails the task at once (a retry is refused the same way), one that does not answer is
        retried."""
        from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook

        try:
            return KafkaOffsetsHook(kafka_config_id=spec.kafka_conn_id).topic_names()
        except KafkaConnectionError as err:
            if err.authentication:
                raise AirflowFailException(f"preflight: {err}") from None
            raise AirflowException(f"preflight: {err}") from None

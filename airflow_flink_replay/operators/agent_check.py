"""``AgentCheckOperator``: before anything is stopped, check both job definitions where the jobs will run.

The check program (:mod:`airflow_flink_replay.flink.agent_check`) runs on the job side through Flink's
PythonDriver — over REST as a ``/plan`` call on the replay cluster (nothing is submitted), or with the CLI
submitter on this worker — imports production's and the candidate's job definitions (and their worker-side code
the way Flink's Python worker imports it), builds both Flink Agents plans, deserialises a few captured records
and runs each agent on one of them (the sample run). :func:`~airflow_flink_replay.core.agent_check.judge`
turns what it found into the report this task logs, returns (the run record keeps it) and, when it refuses,
fails with: the Python error with its traceback (a module Flink's Python worker cannot import included), an
empty plan (the subclassing trap named), a candidate that lost production's actions or resources, a deserializer
that cannot read a captured record, or a sample run Flink Agents refused (tool-call ids that are not UUIDs).

The result's ``changed`` (also pushed as :data:`XCOM_CHANGED_RESOURCES_KEY`) names the resources the candidate
changed, by their fingerprints: the replay DAG's submit task keeps them off production's cassette in the
candidate's replay, and the comparison lists them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.agent_check import AgentIdentity, judge
from airflow_flink_replay.core.flink_models import FlinkPythonProgram
from airflow_flink_replay.core.identity import IdentityPlan
from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.exceptions import FlinkSubmissionError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.hooks.flink_submit import get_submitter
from airflow_flink_replay.ids import XCOM_AGENT_CHECK_KEY, XCOM_CHANGED_RESOURCES_KEY

#: The job-side program (a module of this package: the cluster's Python must have it installed).
CHECK_PROGRAM = "airflow_flink_replay.flink.agent_check"


def job_definitions(spec: ReplaySpec) -> list[tuple[str, str, str]]:
    """``(role, "module:attr", form)`` of production and, when the spec has one, the candidate.

    ``form`` is ``job`` for a job definition (``production.agent_job`` / ``candidate_agent_job``) and
    ``factory`` for the older agent factory form.
    """
    prod_job = getattr(spec.production, "agent_job", None)
    found = [("production", prod_job, "job") if prod_job else ("production", spec.production.agent_factory, "factory")]
    cand_job = getattr(spec, "candidate_agent_job", None)
    if cand_job:
        found.append(("candidate", cand_job, "job"))
    elif spec.candidate_agent_factory:
        found.append(("candidate", spec.candidate_agent_factory, "factory"))
    return [(role, str(ref), form) for role, ref, form in found]


def check_program(
    spec: ReplaySpec, *, emit: str, samples: int = 3, sample_runs: int = 1, module: str = CHECK_PROGRAM
) -> FlinkPythonProgram:
    """The check program for ``spec``: names, references and the policy only — the records are read on the job
    side. ``sample_runs``: run each agent on the first captured record (0: do not)."""
    args: list[str] = []
    for role, ref, form in job_definitions(spec):
        args += [f"--{role}", ref, f"--{role}-form", form]
    args += ["--key-field", spec.production.key_field, "--capture-topic", spec.production.capture_topic,
             "--bootstrap", spec.kafka_bootstrap, "--samples", str(samples), "--sample-runs", str(sample_runs),
             "--policy", spec.policy.to_json(), "--emit", emit]  # fmt: skip
    if spec.mem0_config:
        args += ["--mem0-config", json.dumps(spec.mem0_config, sort_keys=True)]  # references only (spec-checked)
    if spec.kafka_security:
        args += ["--kafka-security", spec.kafka_security.to_arg()]  # references only (model-checked)
    return FlinkPythonProgram(entry_point=None, module=module, program_args=args, parallelism=None, job_name=None)


def production_identity(spec: ReplaySpec, production_details: dict[str, Any] | None) -> AgentIdentity:
    """How the replays will pin the agent: production's uid, else its running agent vertex id (uid hash)."""
    vertex_id = max_parallelism = None
    if production_details:
        try:
            found = IdentityPlan.from_rest(production_details).find_agent()
        except ValueError:
            found = None
        if found is not None:
            vertex_id, max_parallelism = found[0].id, found[0].max_parallelism
    uid = spec.production.agent_uid
    return AgentIdentity(
        uid=uid,
        uid_hash=None if uid else vertex_id,
        max_parallelism=spec.production.max_parallelism or max_parallelism,
        production_vertex=vertex_id,
    )


class AgentCheckOperator(BaseOperator):
    """Run the agent check on the job side; log and return its report; fail when it refuses.

    :param spec: the replay spec (a :class:`ReplaySpec` or its dict, templated).
    :param production_details: production's job details (``GET /jobs/{id}``, templated; the preflight's
        ``production_details``) for the agent operator's identity; None when production is not running.
    :param flink_conn_id: the cluster to run the check on (default: the spec's replay cluster, else
        production's): over REST it only builds a plan, nothing runs there.
    :param submitter: ``rest`` (default: a ``/plan`` call) or ``cli`` (``flink run`` on this worker).
    :param samples: captured records to try each deserializer on.
    :param sample_runs: run each agent on the first captured record, every call behind the replay policy and no
        tool run for real (:mod:`airflow_flink_replay.flink.sample_run`; it is skipped, saying why, for an agent
        with memory or an unmediated resource); 0 turns it off.
    """

    template_fields: Sequence[str] = ("spec", "production_details")
    ui_color = "#fef7e0"

    def __init__(
        self,
        *,
        spec: ReplaySpec | dict[str, Any],
        production_details: dict[str, Any] | None = None,
        flink_conn_id: str | None = None,
        submitter: str = "rest",
        samples: int = 3,
        sample_runs: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sample_runs = sample_runs
        self.spec = spec.model_dump(mode="json") if isinstance(spec, ReplaySpec) else spec
        self.production_details = production_details
        self.flink_conn_id = flink_conn_id
        self.submitter = submitter
        self.samples = samples

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook of the cluster the check runs on."""
        spec = ReplaySpec.model_validate(self.spec)
        return FlinkRestHook(self.flink_conn_id or spec.replay_flink_conn_id or spec.flink_conn_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Run the program (one hook call), judge its facts, log the report."""
        spec = ReplaySpec.model_validate(self.spec)
        submitter = get_submitter(self.submitter, self.hook)  # type: ignore[arg-type]
        program = check_program(spec, emit="plan" if submitter.kind == "rest" else "stdout", samples=self.samples,
                                sample_runs=self.sample_runs)
        try:
            facts = submitter.run_check(program)
        except FlinkSubmissionError as err:  # the program died before it could report: its own traceback
            raise AirflowFailException(f"the agent check could not run on the job side: {err}") from err
        report = judge(facts, spec.policy, production_identity(spec, self.production_details),
                       cassette=bool(spec.production.cassette_topic))
        text = report.render()
        result = {"refused": report.refused, "report": text, "changed": dict(report.changed),
                  "checked": report.model_dump(mode="json")}  # fmt: skip
        if report.refused:
            context["ti"].xcom_push(key=XCOM_AGENT_CHECK_KEY, value=result)
            self.log.error("%s", text)
            raise AirflowFailException(text)
        self.log.info("%s", text)
        context["ti"].xcom_push(key=XCOM_CHANGED_RESOURCES_KEY, value=dict(report.changed))
        return result

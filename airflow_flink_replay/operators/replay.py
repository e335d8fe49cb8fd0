"""Replay variants, from production's savepoint, until FINISHED.

``SubmitReplayJobOperator`` preflights and submits one variant's Flink job and, by default, waits for it
(``wait_for_completion``, like the Databricks provider's ``wait_for_termination``). The replay DAG checks and
submits every variant in one job-side run (``SubmitReplayJobsOperator``) and waits for each in
``AwaitReplayJobOperator``: every variant is submitted before any is waited for, so the three jobs run at the
same time on the replay cluster even when tasks run one at a time. ``PlanReplayJobsOperator`` plans and checks
the variants in a task of their own, for a DAG that wants the check apart from the submission.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_flink_replay.core.flink_models import FlinkPythonProgram
from airflow_flink_replay.core.identity import IdentityPlan
from airflow_flink_replay.core.local_files import replacing
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec, replay_job_name
from airflow_flink_replay.core.replay_plans import IDENTITY_REFUSED, IdentityCheck, identity_report, pin_to_production
from airflow_flink_replay.core.window_coverage import Tie, WindowCoverage
from airflow_flink_replay.exceptions import FlinkRestError, FlinkSubmissionError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.hooks.flink_submit import get_submitter
from airflow_flink_replay.hooks.slot_admission import DEFAULT_CAPACITY_WAIT_S
from airflow_flink_replay.ids import XCOM_CASSETTE_COVERAGE_KEY, XCOM_FLINK_JOB_ID_KEY
from airflow_flink_replay.links.flink import FlinkJobLink
from airflow_flink_replay.run_io import run_storage
from airflow_flink_replay.triggers.flink import FlinkJobStateTrigger

#: The job side's entry point, run by the PythonDriver on the JobManager host: a module of this package's
#: job side (``pip install airflow-flink-replay[flink]`` in the cluster's Python), so no file path has to be
#: shared between the Airflow worker and the JobManager.
REPLAY_JOB_MODULE = "airflow_flink_replay.flink.replay_job"
#: The job side's program that plans every variant in one PythonDriver run (:class:`PlanReplayJobsOperator`).
REPLAY_PLANS_MODULE = "airflow_flink_replay.flink.replay_plans"
_ACTIVE = ("INITIALIZING", "CREATED", "RUNNING", "RESTARTING", "RECONCILING")

#: Seconds a submission waits, at most, for production to process the window before the replays read its
#: cassette.
DEFAULT_WINDOW_WAIT_S = 300.0


def collected_files(output_dir: str, variant: str) -> tuple[str, str]:
    """Where a variant's outputs and audit are collected: next to its ``parts/`` folders (a local path or an
    ``ObjectStoragePath`` URI, as ``output_dir`` is)."""
    base = run_storage.parent(output_dir)
    return run_storage.join(base, f"{variant}.outputs.jsonl"), run_storage.join(base, f"{variant}.audit.jsonl")


def collect_jsonl(folder: Path, target: Path) -> int:
    """Concatenate the finished ``*.jsonl`` part files below ``folder`` into ``target``; return the lines."""
    parts = sorted(p for p in folder.rglob("*.jsonl") if p.is_file() and not p.name.startswith("."))
    lines = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target) as out:  # a symlink planted at the name is replaced, never written through
        for part in parts:
            if part == target:
                continue
            for line in part.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    out.write(line + "\n")
                    lines += 1
    return lines


def unmediated_calls(audit: str | Path) -> dict[str, int]:
    """Unmediated calls in a collected audit file, per kind (``socket``, ``dns``, ``subprocess``, ``file``)."""
    return audit_counts(str(audit))[0]


def audit_counts(audit: str) -> tuple[dict[str, int], dict[str, int]]:
    """From a collected audit file (path or URI): the unmediated calls per kind, and the ``replay`` decisions
    served from production's cassette (``replayed``; of them ``by_arguments``: by their identifying arguments, the
    free text worded otherwise) or not (``unmatched``; empty when nothing was to be replayed)."""
    from airflow_flink_replay.core.compare.loading import read_audit

    unmediated: Counter[str] = Counter()
    cassette: Counter[str] = Counter()
    if run_storage.exists(audit):
        with run_storage.open_text(audit) as stream:
            for record in read_audit(stream):
                if record.resource_type == "unmediated":
                    unmediated[record.resource_name] += 1
                if record.decision == "replay":
                    cassette["unmatched" if record.unmatched else "replayed"] += 1
                    if record.matched == "arguments":  # replayed, its free text worded otherwise
                        cassette["by_arguments"] += 1
    return dict(sorted(unmediated.items())), dict(sorted(cassette.items()))


class _ReplayJobOperator(BaseOperator):
    """What submitting and awaiting a replay share: the spec, the hook, waiting, collecting, cancelling."""

    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#f3e8fd"

    def __init__(
        self,
        *,
        spec: ReplayJobSpec | dict[str, Any],
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 1200.0,
        poll_interval: float = 1.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        kafka_config_id: str = "kafka_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kafka_config_id = kafka_config_id
        self.spec = spec.model_dump(mode="json") if isinstance(spec, ReplayJobSpec) else spec
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self.deferrable = deferrable
        self._job_id: str | None = None

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook of the replay cluster."""
        return FlinkRestHook(self.flink_conn_id)

    def _named_spec(self, context: Any) -> ReplayJobSpec:
        """The validated spec with its job name (the run's and variant's, unless the spec names one)."""
        return _named(self.spec, context["ti"])

    def _attach(self, context: Any, job_id: str) -> None:
        """Name ``job_id`` as this task's job: XCom (the run record reads it if the task fails) and link."""
        context["ti"].xcom_push(key=XCOM_FLINK_JOB_ID_KEY, value=job_id)
        FlinkJobLink.persist(context, self.hook.job_ui_url(job_id))

    def _wait(self, context: Any, spec: ReplayJobSpec, carry: dict[str, Any]) -> dict[str, Any]:
        """Wait (in the triggerer when deferrable) until the job FINISHES, then collect its files. The task
        that waits is the one whose ``on_kill`` cancels the job."""
        job_id = self._job_id = carry["job_id"]
        if self.deferrable:
            if self._finished_already(job_id):
                # Already done (a bounded replay of a small window often is by the time its waiting task
                # starts): collect now rather than defer. A trigger that fires at once races Airflow's own
                # bookkeeping of the deferral — the scheduler then takes the stale "success" of the deferring
                # process for a failure and retries the task (apache/airflow#72716, seen under a real scheduler).
                self.log.info("the %s replay (Flink job %s) has already finished", spec.variant, job_id)
                return self._result(context, spec, carry)
            self.defer(
                trigger=FlinkJobStateTrigger(
                    job_id=job_id,
                    target_states=["FINISHED"],
                    flink_conn_id=self.flink_conn_id,
                    timeout=self.timeout,
                    poll_interval=self.poll_interval,
                    cancel_on_kill=True,  # a killed deferred replay cancels its job (the triggerer's on_kill)
                    carry=carry,
                ),
                method_name="execute_complete",
            )
        try:
            self.hook.wait_for_job_state(job_id, ("FINISHED",), timeout=self.timeout, poll_interval=self.poll_interval)
        except Exception as err:
            self._link_ended(context, job_id, "FAILED")
            raise AirflowException(f"replay {spec.variant} (Flink job {job_id}) failed: {err}") from err
        return self._result(context, spec, carry)

    def _finished_already(self, job_id: str) -> bool:
        """One look at the job before deferring; a job Flink does not answer for yet is waited for."""
        try:
            return self.hook.get_job(job_id).state == "FINISHED"
        except FlinkRestError:
            return False

    def _link_ended(self, context: Any, job_id: str, state: str) -> None:
        """Point the task's Flink link at the ended job's page (the web UI moves it under "completed")."""
        FlinkJobLink.persist(context, self.hook.job_ui_url(job_id, state))

    def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
        """After the trigger: fail with the Flink cause, or collect the outputs."""
        spec = self._named_spec(context)
        if event.get("status") != "success":
            if job_id := (event.get("carry") or {}).get("job_id"):
                self._link_ended(context, job_id, str(event.get("state") or "FAILED"))
            raise AirflowException(f"replay {spec.variant} failed: {event.get('message') or event}")
        return self._result(context, spec, {**event.get("carry", {}), **kwargs})

    def _result(self, context: Any, spec: ReplayJobSpec, carry: dict[str, Any]) -> dict[str, Any]:
        self._link_ended(context, carry["job_id"], "FINISHED")
        output, audit = collected_files(spec.output_dir, spec.variant)
        results = self._collect(spec, output, audit)
        outputs, audits = results["outputs"]["kept"], results["audit"]["kept"]
        unmediated, cassette = audit_counts(audit)
        result = {
            "variant": spec.variant,
            "agent_job": spec.agent_job,
            "agent_factory": spec.agent_factory,
            "job_id": carry["job_id"],
            "job_name": spec.job_name,
            "state": "FINISHED",
            "fork_namespace": spec.job_identifier,
            "action_state_topic": spec.action_state_topic,
            "output": output,
            "output_digest": run_storage.digest(output),
            "output_records": outputs,
            "audit": audit,
            "audit_digest": run_storage.digest(audit),
            "audit_records": audits,
            "unmediated_calls": unmediated,
            "cassette_calls": cassette,
            "duration_s": round(time.time() - float(carry["started"]), 2),
            "finished_at": datetime.now(UTC).isoformat(),
            "identity_preflight": carry.get("preflight"),
            "results": results,
        }
        self.log.info("replay %s finished: %d outputs, %d audit records", spec.variant, outputs, audits)
        if result["unmediated_calls"]:
            self.log.warning(
                "replay %s: %s unmediated call(s) (made outside every resource, see the audit %s and the report)",
                spec.variant, result["unmediated_calls"], audit,
            )  # fmt: skip
        if cassette.get("unmatched"):
            self.log.warning(
                "replay %s: %d call(s) production's cassette had no result for (other arguments, or more calls than "
                "production made): they got the policy's fallback decision (see the audit %s and the report)",
                spec.variant, cassette["unmatched"], audit,
            )  # fmt: skip
        return result

    def _collect(self, spec: ReplayJobSpec, output: str, audit: str) -> dict[str, dict[str, Any]]:
        """The variant's outputs and audit into ``output`` / ``audit``: read back from its result topics (copies
        a restart sent twice dropped), or concatenated from the job's part files without result topics."""
        if spec.results is None:  # the job's part files, in a folder Flink and Airflow share
            outputs = collect_jsonl(Path(spec.output_dir), Path(output.removeprefix("file://")))
            audits = collect_jsonl(Path(spec.audit_dir), Path(audit.removeprefix("file://")))
            return {"outputs": {"kept": outputs, "read": outputs}, "audit": {"kept": audits, "read": audits}}
        from airflow_flink_replay.hooks.replay_results import ReplayResultsHook

        readers = ReplayResultsHook(kafka_config_id=self.kafka_config_id).collect_results(
            spec.results, output, audit
        )
        for kind, reader in readers.items():
            self.log.info(
                "replay %s %s: %d record(s) read from %s, %d kept, %d sent twice by a restart (dropped)",
                spec.variant, kind, reader.read, getattr(spec.results, kind), reader.kept, reader.duplicates,
            )  # fmt: skip
        gaps = readers["outputs"].gaps
        if gaps:
            raise AirflowException(
                f"replay {spec.variant}: outputs missing from {spec.results.outputs}: ids {gaps[:5]} "
                f"({len(gaps)} in all) are below higher ones of the same content. The topic lost records (retention? "
                "another consumer deleting?); the comparison would be wrong. Fix: check the topic's retention and "
                "run the replay again"
            )
        return {kind: reader.model_dump(exclude={"gaps"}) for kind, reader in readers.items()}

    def on_kill(self) -> None:
        """Cancel the replay job this task started or reattached to."""
        if self._job_id:
            try:
                self.hook.cancel_job(self._job_id)
            except Exception:  # best effort: the cleanup task cancels leftovers too
                self.log.exception("could not cancel replay job %s", self._job_id)


class SubmitReplayJobOperator(_ReplayJobOperator):
    """Replay one variant (baseline, baseline_2, candidate) from production's savepoint and wait for it.

    Before submitting, the replay job's plan (``POST /jars/{id}/plan``) is compared with production's
    plan (``core.identity``): the agent must map to production's operator id, max parallelism must match
    and only the old source's state may be dropped — otherwise the task fails with the diff and nothing
    runs. The job restores the savepoint with ``allowNonRestoredState`` (the old source's offsets are
    replaced by the manifest's window), reads the capture window, and FINISHES by itself.

    Retries reattach: a job of this run and variant that is running is waited for, one that FINISHED is
    collected — never submitted twice. ``on_kill`` cancels the job the task started. Returns the output
    and audit files (one JSONL each, concatenated from the job's part files), their digests, record
    counts, the Flink job id and the duration. With ``wait_for_completion=False`` it returns as soon as
    the job is submitted (``{variant, job_id, job_name, started, preflight}``), for
    :class:`AwaitReplayJobOperator` to wait on.

    :param spec: the :class:`ReplayJobSpec` (or its dict; templated) without ``job_name``.
    :param savepoint_path: production's savepoint (templated).
    :param production_plan: production's job details JSON (``GET /jobs/{id}``, templated) for the
        identity preflight; the quiesce result's ``plan`` is accepted too.
    :param production_agent_uid: the uid production's agent carries, if any.
    :param flink_conn_id: the cluster that runs replays (may differ from production's).
    :param submitter: ``rest`` (default) or ``cli``.
    :param replay_program: the replay program: a module run with ``-pym`` (default: this package's
        ``airflow_flink_replay.flink.replay_job``, which the cluster's Python must have installed) or a
        ``.py`` path on the JobManager host.
    :param wait_for_completion: wait until the job FINISHES and collect its files (default), or return once
        it is submitted.
    :param identity_preflight: the identity reports of :class:`PlanReplayJobsOperator` (its result: report by
        variant; templated). Given, the variant's plan was checked with the others' in one job-side run and
        this task does not plan it again; without it, the task plans its own job (one ``/plan`` call).
    :param timeout: seconds the replay may run.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param kafka_config_id: the Kafka connection: reads the end of production's cassette topic when the manifest
        links one, and the replay's result topics (``spec.results``) back once it FINISHED.
    :param window_wait: seconds to wait, at most, until production has processed the window before the
        cassette's end is read (see :class:`SubmitReplayJobsOperator`).
    :param compare_key: the comparison's key (JSONPath); ties window records to production's outputs while
        waiting when the input records carry it too (see :class:`SubmitReplayJobsOperator`).
    :param window_tie: how production's outputs tie to the window's records while waiting: ``record`` or
        ``watermark`` (see :class:`SubmitReplayJobsOperator`).
    """

    template_fields: Sequence[str] = ("spec", "savepoint_path", "production_plan", "identity_preflight")

    def __init__(
        self,
        *,
        spec: ReplayJobSpec | dict[str, Any],
        savepoint_path: str | None,
        production_plan: dict[str, Any] | None = None,
        production_agent_uid: str | None = None,
        submitter: str = "rest",
        replay_program: str = REPLAY_JOB_MODULE,
        wait_for_completion: bool = True,
        identity_preflight: dict[str, str] | str | None = None,
        window_wait: float = DEFAULT_WINDOW_WAIT_S,
        compare_key: str | None = None,
        window_tie: Tie = "record",
        **kwargs: Any,
    ) -> None:
        super().__init__(spec=spec, **kwargs)
        self.identity_preflight = identity_preflight
        self.window_wait = float(window_wait)
        self.compare_key = compare_key
        self.window_tie = window_tie
        self.replay_program = replay_program
        self.savepoint_path = savepoint_path
        self.production_plan = production_plan
        self.production_agent_uid = production_agent_uid
        self.submitter = submitter
        self.wait_for_completion = wait_for_completion

    # ------------------------------------------------------------------------------------------ steps
    def _spec(self, context: Any) -> ReplayJobSpec:
        spec = self._named_spec(context)
        if not (spec.production_action_state_topic and spec.production_job_identifier):
            self.log.warning(
                "the replay spec does not name production's action-state topic and job identifier "
                "(production_action_state_topic, production_job_identifier): the guard that refuses a replay "
                "writing into production's state cannot run. Fix: set both in the spec (the DAG does)"
            )
        return pin_to_production(
            spec, _production(self.production_plan), self.production_agent_uid
        ).with_manifest_carried(run_storage.location)

    def _program(self, spec: ReplayJobSpec) -> FlinkPythonProgram:
        return _replay_program(self.replay_program, [spec], job_name=spec.job_name)

    def _preflight(self, hook: FlinkRestHook, spec: ReplayJobSpec, program: FlinkPythonProgram) -> str:
        """Identity preflight on the replay's plan before it runs; returns the rendered report."""
        production = _production(self.production_plan)
        if production is None:
            self.log.warning("no production plan given: the identity preflight is skipped")
            return "skipped: no production plan"
        if self.identity_preflight is not None:
            report_text = _planned_report(self.identity_preflight, spec.variant)
            self.log.info("identity preflight (planned with the other variants):\n%s", report_text)
            return report_text
        submitter = get_submitter("rest", hook)
        replay_plan = submitter.plan(program)  # type: ignore[attr-defined]  # REST only: the JM builds the plan
        report = identity_report(
            production, spec, replay_plan.model_dump(mode="json", by_alias=True), self.production_agent_uid
        )
        self.log.info("%s", report.render())
        report.raise_if_refused()
        return report.render()

    def _preflight_and_submit(
        self, context: Any, hook: FlinkRestHook, spec: ReplayJobSpec
    ) -> tuple[ReplayJobSpec, str, str]:
        """Serve ``spec`` production's cassette, run the identity preflight and submit its job; returns the spec as
        served, the job id and the preflight's report."""
        served, coverage = with_cassette([spec], self.kafka_config_id, self.log, window_wait=self.window_wait,
                                         compare_key=self.compare_key, tie=self.window_tie)  # fmt: skip
        spec = served[0]
        _push_coverage(context, coverage)
        program = self._program(spec)
        preflight = self._preflight(hook, spec, program)
        _make_output_folders([spec])
        submitted = get_submitter(self.submitter, hook).submit(  # type: ignore[arg-type]
            program,
            savepoint_path=self.savepoint_path,
            allow_non_restored_state=bool(self.savepoint_path),
            timeout=300,
        )
        self.log.info("submitted %s replay as Flink job %s", spec.variant, submitted.job_id)
        return spec, submitted.job_id, preflight

    # ---------------------------------------------------------------------------------------- execute
    def execute(self, context: Any) -> Any:
        """Reattach or preflight + submit, then (``wait_for_completion``) wait until the replay FINISHES."""
        spec = self._spec(context)
        hook = self.hook
        started = time.time()
        existing = _existing(hook.list_jobs().jobs, spec.job_name or "")
        if existing:
            job_id, state = existing
            preflight = "reattached"
            self.log.info("reattaching to %s job %s of this run (%s)", state, job_id, spec.variant)
        else:
            spec, job_id, preflight = self._preflight_and_submit(context, hook, spec)
        self._attach(context, job_id)
        carry = {"job_id": job_id, "started": started, "preflight": preflight}
        if not self.wait_for_completion:  # the job outlives this task: the awaiting task cancels it if killed
            return {"variant": spec.variant, "job_name": spec.job_name, **carry}
        return self._wait(context, spec, carry)


class AwaitReplayJobOperator(_ReplayJobOperator):
    """Wait for a replay job that :class:`SubmitReplayJobOperator` submitted (``wait_for_completion=False``)
    until it FINISHES, then collect its output and audit files; returns what the submitting operator returns
    when it waits itself.

    A retry attaches to the same Flink job again (it only waits and reads files); ``on_kill`` cancels the
    job.

    :param spec: the variant's :class:`ReplayJobSpec` (or its dict; templated), as given to the submit task.
    :param submitted: the submit task's result (templated): ``job_id`` and ``started`` are read from it — or
        from its entry for this variant when it is :class:`SubmitReplayJobsOperator`'s (the jobs by variant).
    :param flink_conn_id: the cluster that runs replays.
    :param timeout: seconds the replay may run.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param kafka_config_id: the Kafka connection the replay's result topics (``spec.results``) are read with.
    """

    template_fields: Sequence[str] = ("spec", "submitted")

    def __init__(
        self, *, spec: ReplayJobSpec | dict[str, Any], submitted: dict[str, Any] | None, **kwargs: Any
    ) -> None:
        super().__init__(spec=spec, **kwargs)
        self.submitted = submitted

    def execute(self, context: Any) -> Any:
        """Wait for the submitted job, then collect its files."""
        spec = self._named_spec(context)
        submitted = self.submitted or {}
        if "job_id" not in submitted and isinstance(submitted.get(spec.variant), dict):
            submitted = submitted[spec.variant]  # SubmitReplayJobsOperator's result: the jobs by variant
        if not submitted.get("job_id"):
            raise AirflowException(
                f"replay {spec.variant}: no submitted Flink job to wait for (submitted={submitted!r}); "
                "see the submit task's log"
            )
        job_id = str(submitted["job_id"])
        self.log.info("waiting for the %s replay, Flink job %s", spec.variant, job_id)
        self._attach(context, job_id)
        carry = {"job_id": job_id, "started": submitted.get("started") or time.time(),
                 "preflight": submitted.get("preflight")}
        return self._wait(context, spec, carry)


class PlanReplayJobsOperator(BaseOperator):
    """Plan every replay variant in one job-side run and check each plan against production's (identity
    preflight), before any variant is submitted.

    One PythonDriver program (``airflow_flink_replay.flink.replay_plans``, a ``POST /jars/{id}/plan`` call:
    nothing runs) builds each variant's replay job exactly as the replay program will and sends back the job
    graphs; each is checked with :mod:`~airflow_flink_replay.core.identity` — the agent must map to
    production's operator id, max parallelism must match, only the old source's state may be dropped. Any
    refusal fails the task with every variant's report (no retry: the same plans refuse again), so nothing is
    submitted. Returns the rendered report by variant, for
    :class:`SubmitReplayJobOperator`'s ``identity_preflight``. One program instead of a ``/plan`` per variant:
    each PythonDriver run starts a Python with PyFlink on the JobManager, which runs one at a time.

    :param specs: the variants' :class:`ReplayJobSpec` (or dicts; templated), as given to the submit tasks.
    :param production_plan: production's job details JSON (``GET /jobs/{id}``) or the quiesce result's plan
        (templated). Without it the preflight is skipped (logged), as in the submit task.
    :param production_agent_uid: the uid production's agent carries, if any.
    :param flink_conn_id: the cluster that runs replays (where the program runs).
    :param plans_program: the job-side planning module (run with ``-pym``).
    """

    template_fields: Sequence[str] = ("specs", "production_plan")

    def __init__(
        self,
        *,
        specs: Sequence[ReplayJobSpec | dict[str, Any]],
        production_plan: dict[str, Any] | None,
        production_agent_uid: str | None = None,
        flink_conn_id: str = "flink_default",
        plans_program: str = REPLAY_PLANS_MODULE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.specs = [s.model_dump(mode="json") if isinstance(s, ReplayJobSpec) else s for s in specs]
        self.production_plan = production_plan
        self.production_agent_uid = production_agent_uid
        self.flink_conn_id = flink_conn_id
        self.plans_program = plans_program

    def execute(self, context: Any) -> dict[str, str]:
        """Plan every variant (one program), check each plan, fail with the reports on any refusal."""
        production = _production(self.production_plan)
        specs = _pinned(self.specs, context["ti"], production, self.production_agent_uid)
        if production is None:
            self.log.warning("no production plan given: the identity preflight is skipped")
            return {spec.variant: "skipped: no production plan" for spec in specs}
        args = [arg for spec in specs for arg in ("--spec-json", spec.model_dump_json())]
        program = FlinkPythonProgram(entry_point=None, module=self.plans_program, program_args=args,
                                     parallelism=None, job_name=None)  # fmt: skip
        submitter = get_submitter("rest", FlinkRestHook(self.flink_conn_id))
        planned = {p.variant: p for p in submitter.plan_replays(program)}  # type: ignore[attr-defined]  # REST only
        reports: dict[str, str] = {}
        refused: list[str] = []
        for spec in specs:
            got = planned.get(spec.variant)
            if got is None or got.plan is None:
                why = got.error if got else "the planning program returned no plan for it"
                refused.append(f"replay {spec.variant}: its job could not be built on the job side:\n{why}")
                continue
            report = identity_report(production, spec, got.plan, self.production_agent_uid)
            reports[spec.variant] = text = report.render()
            self.log.info("%s: %s", spec.variant, text)
            if not report.maps:
                refused.append(f"replay {spec.variant}: {text}")
        if refused:
            raise AirflowFailException("\n\n".join(refused))
        return reports


class SubmitReplayJobsOperator(BaseOperator):
    """Check every replay variant against production's plan and submit them all, in one job-side run.

    One PythonDriver program (the replay program with ``--spec-json`` once per variant) builds every variant's
    job, checks each job graph against production's plan (the identity preflight of
    :mod:`~airflow_flink_replay.core.identity`: the agent maps to production's operator id, max parallelism
    matches, only the old source's state is dropped), then submits each as its own Flink job restoring
    production's savepoint (``allowNonRestoredState``): one Python start on the JobManager instead of one per
    variant and one more for planning — the JobManager runs one at a time. A variant that cannot be built or
    does not map stops the program before any job is submitted; a refusal fails the task at once with every
    variant's report. Each variant's report is then rendered again from the plan of the job that runs
    (``GET /jobs/{id}/plan``); should one not map (a replay program that does not check), every job of this
    submission is cancelled and the task fails.

    Retries reattach: a variant that already has a job of this run (active or FINISHED, looked up by its job
    name) is not submitted again, only the missing ones are. Returns, by variant, what
    :class:`AwaitReplayJobOperator` waits on: ``{variant, job_name, job_id, started, preflight}``.

    :param specs: the variants' :class:`ReplayJobSpec` (or dicts; templated), as given to the plan task.
    :param savepoint_path: production's savepoint (templated).
    :param production_plan: production's job details JSON or the quiesce result's plan (templated): the pins.
    :param production_agent_uid: the uid production's agent carries, if any.
    :param identity_preflight: :class:`PlanReplayJobsOperator`'s result, the identity report by variant
        (templated), when the variants were planned and checked by a task of their own; a variant without a
        report is then not submitted. Without it (default) the check runs in the submission program.
    :param flink_conn_id: the cluster that runs replays.
    :param submitter: ``rest`` (default) or ``cli``.
    :param replay_program: the replay program: a module run with ``-pym`` (default) or a ``.py`` path on the
        JobManager host.
    :param submit_timeout: seconds the submission (and each job's appearance on the cluster) may take.
    :param capacity_timeout: seconds the submission waits, at most, for the task slots its jobs need (each job
        takes its parallelism in slots) while other replays hold them; then it fails having submitted nothing.
        What it waited is in each variant's result (``capacity_wait_s``, ``submit_lock_wait_s``).
    :param kafka_config_id: the Kafka connection, to read the end of production's cassette topic when the
        manifest links one: every variant of the submission is served the same recorded calls.
    :param window_wait: seconds to wait, at most, before reading the cassette's end, until production has
        processed the window (its outputs reach every window record); what the wait found is pushed as XCom
        ``cassette_coverage`` (:data:`XCOM_CASSETTE_COVERAGE_KEY`) for the comparison.
    :param compare_key: the comparison's key (JSONPath): while waiting, a window record is tied to its output by
        event time and this key when the input records carry it too (an agent that echoes its input's id);
        without it, by event time alone.
    :param window_tie: ``record`` (the default: one output per record, stamped with its event time) or
        ``watermark`` (a pipeline whose outputs come from an event-time window: an output stamped T means every
        record up to T was processed), the spec's ``window.outputs_tied_by``.
    :param changed_resources: the resources the candidate changed, ``{name: "changed" | "added"}`` or a list of
        names (the agent check's XCom ``changed_resources``; templated): the candidate's spec carries them
        (``changed_resources``), and its replay never serves them production's cassette.
    """

    template_fields: Sequence[str] = (
        "specs", "savepoint_path", "production_plan", "identity_preflight", "changed_resources"
    )
    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#f3e8fd"

    def __init__(
        self,
        *,
        specs: Sequence[ReplayJobSpec | dict[str, Any]],
        savepoint_path: str | None,
        production_plan: dict[str, Any] | None = None,
        production_agent_uid: str | None = None,
        identity_preflight: dict[str, str] | None = None,
        changed_resources: Mapping[str, str] | Sequence[str] | None = None,
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        submitter: str = "rest",
        replay_program: str = REPLAY_JOB_MODULE,
        submit_timeout: float = 300.0,
        capacity_timeout: float = DEFAULT_CAPACITY_WAIT_S,
        kafka_config_id: str = "kafka_default",
        window_wait: float = DEFAULT_WINDOW_WAIT_S,
        compare_key: str | None = None,
        window_tie: Tie = "record",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kafka_config_id = kafka_config_id
        self.window_wait = float(window_wait)
        self.compare_key = compare_key
        self.window_tie = window_tie
        self.specs = [s.model_dump(mode="json") if isinstance(s, ReplayJobSpec) else s for s in specs]
        self.savepoint_path = savepoint_path
        self.production_plan = production_plan
        self.production_agent_uid = production_agent_uid
        self.identity_preflight = identity_preflight
        self.changed_resources = changed_resources
        self.flink_conn_id = flink_conn_id
        self.submitter = submitter
        self.replay_program = replay_program
        self.submit_timeout = float(submit_timeout)
        self.capacity_timeout = float(capacity_timeout)

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook of the replay cluster."""
        return FlinkRestHook(self.flink_conn_id)

    def _report(self, variant: str, production: IdentityPlan | None) -> str | None:
        """The variant's identity report from a plan task (refuses a variant it did not check), or None when
        the submission program checks it."""
        if production is None:
            self.log.warning("no production plan given: the identity preflight is skipped for %s", variant)
            return "skipped: no production plan"
        if self.identity_preflight is None:
            return None
        reports = self.identity_preflight if isinstance(self.identity_preflight, dict) else {}
        return _planned_report(reports, variant)

    def _program(self, specs: list[ReplayJobSpec], production: IdentityPlan | None) -> FlinkPythonProgram:
        """The submission program for ``specs``; with the identity check when no plan task checked them."""
        program = _replay_program(self.replay_program, specs)
        if production is None or self.identity_preflight is not None:
            return program
        check = IdentityCheck(production=production, production_agent_uid=self.production_agent_uid)
        return program.model_copy(update={"program_args": [*program.program_args, *check.to_argv()]})

    def _submit(
        self, hook: FlinkRestHook, specs: list[ReplayJobSpec], production: IdentityPlan | None
    ) -> dict[str, Any]:
        """Run the submission program once the replay cluster has the slots its jobs take (each its parallelism);
        returns what the submission waited (``slots``, ``capacity_wait_s``, ``submit_lock_wait_s``). A refusal
        of the identity preflight fails the task at once."""
        _make_output_folders(specs)
        slots = sum(max(1, spec.parallelism) for spec in specs)
        try:
            done = get_submitter(self.submitter, hook).submit(  # type: ignore[arg-type]
                self._program(specs, production),
                savepoint_path=self.savepoint_path,
                allow_non_restored_state=bool(self.savepoint_path),
                timeout=self.submit_timeout,
                slots=slots,
                capacity_timeout=self.capacity_timeout,
            )
        except FlinkSubmissionError as err:
            text = f"{err}\n{err.output}"
            if IDENTITY_REFUSED not in text:
                raise
            refusal = text[text.index(IDENTITY_REFUSED):]
            raise AirflowFailException(f"{refusal}\n(the replay program's output, JobManager log)") from err
        if done.capacity_wait_s or done.lock_wait_s > 1:
            self.log.info("the submission waited %.1f s for %d free task slots and %.1f s for the JobManager's "
                          "submission lock", done.capacity_wait_s, slots, done.lock_wait_s)  # fmt: skip
        return {"slots": done.slots, "capacity_wait_s": done.capacity_wait_s, "submit_lock_wait_s": done.lock_wait_s}

    def _running_report(
        self, hook: FlinkRestHook, spec: ReplayJobSpec, job_id: str, production: IdentityPlan
    ) -> tuple[str, bool]:
        """The identity report of the job that runs (its plan from Flink), rendered, and whether it maps. When
        Flink does not answer with the plan, this package's replay program counts as the check (it checked the
        graph before submitting it); another program's job does not map."""
        try:
            plan = hook.get_plan(job_id).model_dump(mode="json", by_alias=True)
        except FlinkRestError as err:
            checked = self.replay_program == REPLAY_JOB_MODULE
            self.log.warning("the plan of the %s replay (job %s) could not be read: %s", spec.variant, job_id, err)
            verdict = "MAPS (checked by the submission program)" if checked else "UNKNOWN"
            return f"identity preflight: {verdict}; the running job's plan could not be read: {err}", checked
        report = identity_report(production, spec, plan, self.production_agent_uid)
        return report.render(), report.maps

    def execute(self, context: Any) -> dict[str, dict[str, Any]]:
        """Reattach the variants that have a job, submit the others in one program, return the jobs by variant."""
        production = _production(self.production_plan)
        specs = _pinned(self.specs, context["ti"], production, self.production_agent_uid)
        specs = with_changed_resources(specs, self.changed_resources, self.log)
        reports = {spec.variant: self._report(spec.variant, production) for spec in specs}
        hook = self.hook
        started = time.time()
        submitted, missing = self._reattached(hook, specs)
        if missing:
            submitted.update(self._submitted(context, hook, missing, reports, production))
        jobs = {
            spec.variant: {"variant": spec.variant, "job_name": spec.job_name, "started": started,
                           **submitted[spec.variant]}
            for spec in specs
        }  # fmt: skip
        first = jobs[specs[0].variant]["job_id"] if specs else None
        if first:
            FlinkJobLink.persist(context, hook.job_ui_url(first))
        return jobs

    def _reattached(
        self, hook: FlinkRestHook, specs: list[ReplayJobSpec]
    ) -> tuple[dict[str, dict[str, Any]], list[ReplayJobSpec]]:
        """The variants that already have a job of this run (a retry), by variant; and the specs that have none."""
        reattached: dict[str, dict[str, Any]] = {}
        missing: list[ReplayJobSpec] = []
        jobs_now = hook.list_jobs().jobs
        for spec in specs:
            if found := _existing(jobs_now, spec.job_name or ""):
                self.log.info("reattaching to %s job %s of this run (%s)", found[1], found[0], spec.variant)
                reattached[spec.variant] = {"job_id": found[0], "preflight": "reattached"}
            else:
                missing.append(spec)
        return reattached, missing

    def _submitted(
        self,
        context: Any,
        hook: FlinkRestHook,
        missing: list[ReplayJobSpec],
        reports: dict[str, str | None],
        production: IdentityPlan | None,
    ) -> dict[str, dict[str, Any]]:
        """Serve ``missing`` production's cassette, submit them in one program and check each job that runs against
        production's plan when neither a plan task nor the program did (``reports``: what the plan task found); a
        job that does not map cancels every job of this submission and fails the task."""
        missing, coverage = with_cassette(missing, self.kafka_config_id, self.log, window_wait=self.window_wait,
                                          compare_key=self.compare_key, tie=self.window_tie)  # fmt: skip
        _push_coverage(context, coverage)
        waited = self._submit(hook, missing, production)
        appeared = self._appeared(hook, missing)
        submitted: dict[str, dict[str, Any]] = {}
        refused: list[str] = []
        for spec in missing:
            job_id, report = appeared[spec.variant], reports[spec.variant]
            if report is None and production is not None:
                report, maps = self._running_report(hook, spec, job_id, production)
                if not maps:
                    refused.append(f"replay {spec.variant}: {report}")
            self.log.info("submitted %s replay as Flink job %s\n%s", spec.variant, job_id, report)
            submitted[spec.variant] = {"job_id": job_id, "preflight": report, **waited}
        if refused:
            for job_id in appeared.values():
                hook.cancel_job(job_id)
            raise AirflowFailException(
                "the running replay jobs do not map onto production's savepoint (the replay program did not "
                "check them); every job of this submission was cancelled:\n\n" + "\n\n".join(refused)
            )
        return submitted

    def _appeared(self, hook: FlinkRestHook, specs: list[ReplayJobSpec]) -> dict[str, str]:
        """By variant, the id of the job the program submitted for each of ``specs`` (looked up by job name)."""
        deadline = time.monotonic() + min(self.submit_timeout, 60.0)
        found: dict[str, str] = {}
        while True:
            jobs_now = hook.list_jobs().jobs
            for spec in specs:
                if spec.variant not in found and (job := _existing(jobs_now, spec.job_name or "")):
                    found[spec.variant] = job[0]
            if len(found) == len(specs):
                return {spec.variant: found[spec.variant] for spec in specs}
            if time.monotonic() > deadline:
                spec = next(s for s in specs if s.variant not in found)
                raise AirflowException(
                    f"replay {spec.variant}: the replay program ran but no Flink job named {spec.job_name!r} "
                    f"appeared on {hook.base_url}; see the JobManager log"
                )
            time.sleep(0.5)


def _make_output_folders(specs: Sequence[ReplayJobSpec]) -> None:
    """Create the folders the jobs of ``specs`` write their files to (a folder Flink and Airflow share), unless they
    write to result topics."""
    for spec in specs:
        if spec.results is None:
            for folder in (spec.output_dir, spec.audit_dir):
                Path(folder).mkdir(parents=True, exist_ok=True)


def _existing(jobs_now: Sequence[Any], job_name: str) -> tuple[str, str] | None:
    """Among the cluster's jobs (``list_jobs().jobs``), one named ``job_name`` (this run's variant; a retry):
    prefer an active one, then a FINISHED one."""
    jobs = [j for j in jobs_now if j.name == job_name]
    for wanted in (_ACTIVE, ("FINISHED",)):
        for job in sorted(jobs, key=lambda j: j.start_time, reverse=True):
            if job.state in wanted:
                return job.jid, job.state
    return None


def _replay_program(
    replay_program: str, specs: Sequence[ReplayJobSpec], job_name: str | None = None
) -> FlinkPythonProgram:
    """The replay program for ``specs`` (``--spec-json`` each): a module run with ``-pym``, or a ``.py`` path."""
    by_path = replay_program.endswith(".py")
    return FlinkPythonProgram(
        entry_point=replay_program if by_path else None,
        module=None if by_path else replay_program,
        program_args=[arg for spec in specs for arg in spec.to_argv()],
        parallelism=None,
        job_name=job_name,
    )


def _planned_report(reports: dict[str, str] | str, variant: str) -> str:
    """``variant``'s report among :class:`PlanReplayJobsOperator`'s (or the one report given); refuses a variant
    that was not planned."""
    text = reports.get(variant) if isinstance(reports, dict) else reports
    if not text:
        raise AirflowFailException(
            f"replay {variant}: identity_preflight holds no report for this variant "
            f"(variants: {sorted(reports) if isinstance(reports, dict) else '-'}). Nothing was submitted. Fix: pass "
            "the result of the PlanReplayJobsOperator that planned this variant's spec"
        )
    return str(text)


def _pinned(specs: Sequence[ReplayJobSpec | dict[str, Any]], ti: Any, production: IdentityPlan | None,
            agent_uid: str | None) -> list[ReplayJobSpec]:
    """The variants' specs as they are planned and submitted: named for this run, pinned to production, each
    carrying its manifest (the job side reads no file of Airflow's)."""
    return [pin_to_production(_named(raw, ti), production, agent_uid).with_manifest_carried(run_storage.location)
            for raw in specs]


#: The variant whose spec carries the changed resources (the baselines run production's own code).
CANDIDATE_VARIANT = "candidate"


def with_changed_resources(
    specs: list[ReplayJobSpec], changed: Mapping[str, str] | Sequence[str] | None, log: Any
) -> list[ReplayJobSpec]:
    """``specs`` with the candidate's carrying ``changed`` (the agent check's changed resources, by name), which its
    replay never serves production's cassette (``ReplayJobSpec.changed_resources``)."""
    if isinstance(changed, str):  # a template rendered to text: the names cannot be told apart safely
        raise AirflowFailException(
            f"changed_resources must be a mapping or a list of resource names, got text {changed[:200]!r}. Fix: "
            "pass the agent check's XCom as an XComArg (agent_check.output['changed_resources'])"
        )
    names = sorted(changed) if changed else []
    if not names:
        return specs
    out = []
    for spec in specs:
        if spec.variant == CANDIDATE_VARIANT:
            spec = spec.with_changed_resources(names)
            log.info("replay %s: the candidate changed %s: never served production's cassette", spec.variant,
                     ", ".join(spec.changed_resources))
        out.append(spec)
    return out


def with_cassette(
    specs: list[ReplayJobSpec],
    kafka_config_id: str,
    log: Any,
    *,
    window_wait: float = DEFAULT_WINDOW_WAIT_S,
    compare_key: str | None = None,
    tie: Tie = "record",
) -> tuple[list[ReplayJobSpec], WindowCoverage | None]:
    """``specs`` served production's cassette when their manifest links one: the cassette topic from its offsets
    at the savepoint to its end now, read once for all of them (the same recorded calls for every variant).

    First waits, at most ``window_wait`` seconds, until production has processed the window (its outputs reach
    every window record: :func:`~airflow_flink_replay.hooks.window_progress.await_window`, tied by event time
    and ``compare_key`` where the records carry it), so that the calls production makes for the window are in
    the cassette (``tie``: how outputs tie to records, :data:`~airflow_flink_replay.core.window_coverage.Tie`);
    returns what that wait found (None without a cassette, or without an output topic to tell
    production's progress by)."""
    from airflow_flink_replay.core.cassette import CassetteWindow
    from airflow_flink_replay.core.manifest import ReplayManifest
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
    from airflow_flink_replay.hooks.window_progress import await_window

    linked = [
        (spec, ReplayManifest.model_validate_json(spec.manifest_text) if spec.manifest_text else None)
        for spec in specs
    ]
    if not any(m is not None and m.capture.cassette is not None and s.cassette is None for s, m in linked):
        return specs, None
    ends: dict[str, dict[int, int]] = {}
    out: list[ReplayJobSpec] = []
    coverage: WindowCoverage | None = None
    hook = KafkaOffsetsHook(kafka_config_id=kafka_config_id)
    try:
        for spec, manifest in linked:
            link = manifest.capture.cassette if manifest is not None else None
            if manifest is None or link is None or spec.cassette is not None:
                out.append(spec)
                continue
            if link.topic not in ends:
                coverage = await_window(hook, manifest, timeout=window_wait, log=log, key_path=compare_key, tie=tie)
                ends[link.topic] = hook.end_offsets(link.topic)
            window = CassetteWindow(topic=link.topic, start_offsets=link.start_offsets, end_offsets=ends[link.topic])
            log.info("replay %s: production's cassette %s, %d recorded calls since the savepoint", spec.variant,
                     link.topic, window.size)
            out.append(spec.model_copy(update={"cassette": window}))
    finally:
        hook.close()
    return out, coverage


def _push_coverage(context: Any, coverage: WindowCoverage | None) -> None:
    """Push the window coverage for the comparison (nothing when it was not judged)."""
    if coverage is not None:
        context["ti"].xcom_push(key=XCOM_CASSETTE_COVERAGE_KEY, value=coverage.model_dump(mode="json"))


def _named(spec: ReplayJobSpec | dict[str, Any], ti: Any) -> ReplayJobSpec:
    """The validated spec with its job name: the run's and variant's, unless the spec names one."""
    valid = ReplayJobSpec.model_validate(spec)  # refuses production's action-state topic / job identifier
    if valid.job_name:
        return valid
    return valid.model_copy(update={"job_name": replay_job_name(ti.dag_id, ti.run_id, valid.variant)})


def _production(plan: dict[str, Any] | None) -> IdentityPlan | None:
    """Production's plan for the identity preflight and the pins, from whatever form the DAG holds."""
    return IdentityPlan.from_rest(_as_rest_details(plan)) if plan else None


def _as_rest_details(plan: dict[str, Any]) -> dict[str, Any]:
    """Accept job details JSON (``GET /jobs/{id}``) or the quiesce result's ``ProductionPlan`` dict."""
    if "plan" in plan or "nodes" in plan:
        return plan
    vertices = plan.get("vertices", [])
    nodes = [{"id": v["id"], "description": v["name"], "parallelism": v.get("parallelism", 1)} for v in vertices]
    details = [{"id": v["id"], "name": v["name"], "maxParallelism": v.get("max_parallelism")} for v in vertices]
    return {
        "jid": plan.get("job_id", ""),
        "name": plan.get("job_name", ""),
        "vertices": details,
        "plan": {"jid": plan.get("job_id", ""), "name": plan.get("job_name", ""), "nodes": nodes},
    }

"""One builder per stage of the replay chain (docs/concepts.md); each creates its tasks, wires the edges inside
the stage and returns them. :func:`wire` adds the edges between stages.

Values travel one way: as XComArgs (``run[ids.XCOM_..._KEY]`` of the resolve task, ``task.output`` or
``task.output[key]`` of an upstream task), resolved when the consuming task runs. An XComArg argument
also makes its task upstream; the one place that must read a task it does not depend on,
``replay_from``, pulls inside its body (a skipped branch must not skip the replays).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay import ids
from airflow_flink_replay.core.production_lease import lease_folder
from airflow_flink_replay.core.replay_spec import MAX_AA_REPLAYS, ReplaySpec, variant_names
from airflow_flink_replay.operators.action_state import DeleteReplayTopicsOperator, IsolateActionStateOperator
from airflow_flink_replay.operators.agent_check import AgentCheckOperator
from airflow_flink_replay.operators.compare import (
    ComparedRuns,
    CompareReplayOutputsOperator,
    FidelitySettings,
    ReportSettings,
)
from airflow_flink_replay.operators.flink import QuiesceRef, ResumeJobOperator
from airflow_flink_replay.operators.manifest import (
    CaptureFormat,
    CreateReplayManifestOperator,
    ProductionFacts,
    RecordStartOffsetsOperator,
    ReuseManifestOperator,
)
from airflow_flink_replay.operators.mem0 import (
    DropMem0ForksOperator,
    ForkMem0NamespaceOperator,
    PrecopyMem0NamespaceOperator,
    VerifyMem0UntouchedOperator,
)
from airflow_flink_replay.operators.preflight import ReplayPreflightOperator
from airflow_flink_replay.operators.production_check import AssertProductionOperator
from airflow_flink_replay.operators.production_lease import LeaseSettings
from airflow_flink_replay.operators.replay import AwaitReplayJobOperator, SubmitReplayJobsOperator
from airflow_flink_replay.operators.replay_cleanup import CancelLeftoverReplaysOperator
from airflow_flink_replay.operators.run_record import RunRecordOperator
from airflow_flink_replay.operators.stop_window import StopWindowOperator
from airflow_flink_replay.replay_dag.run import approved_asset
from airflow_flink_replay.sensors.capture_window import CaptureWindowSensor

#: The tasks of a stage: operators or XComArgs of decorated tasks (both take ``>>``).
Task = Any


def retry(times: int, *, delay_s: float = 10.0, backoff: bool = False) -> dict[str, Any]:
    """Retry arguments of one task."""
    return {
        "retries": times,
        "retry_delay": timedelta(seconds=delay_s),
        "retry_exponential_backoff": 2.0 if backoff else 0,
        "max_retry_delay": timedelta(minutes=2),
    }


NO_RETRY = retry(0)
#: Every variant a spec can have (``aa_replays`` at its most): the per-variant rows of :data:`RETRIES`.
_ALL_VARIANTS = variant_names(MAX_AA_REPLAYS)
#: Each task's retries, with the reason. Set per task, never DAG-wide: a task whose retry could duplicate
#: work (a second replay job, a second copy of production, a longer downtime) gets none, whatever the
#: DAG's ``default_args`` say. Refusals a retry cannot change fail at once (``AirflowFailException``).
#: :func:`wire` applies it to every stage's tasks (``resolve``, built in ``run``, retries twice: it is pure).
RETRIES: dict[str, dict[str, Any]] = {
    ids.TASK_PREFLIGHT: retry(2),  # read-only checks
    ids.TASK_AGENT_CHECK: retry(1),  # builds a plan only; a refusal fails at once
    ids.TASK_CHOOSE_START: retry(1),  # pure: reads the resolved mode
    ids.TASK_OFFSETS_BEFORE_QUIESCE: retry(2),  # reads end offsets only
    # deterministic trigger id: a retry reattaches to the same stop, and finishes the window only while
    # production is still stopped (a window that resumed production fails for good)
    ids.TASK_QUIESCE: retry(1, delay_s=5),
    ids.TASK_START_OFFSETS: retry(2),  # reads end offsets only
    ids.TASK_REUSE_MANIFEST: retry(2),  # validates an earlier manifest and writes the same one again
    # resume is idempotent (reattaches to an earlier try's job, never a second production job): retried
    # with backoff, so one transient REST error does not leave production stopped
    ids.TASK_RESUME_PRODUCTION: retry(4, delay_s=5, backoff=True),
    ids.TASK_CAPTURE_WINDOW: retry(2),  # reads offsets only
    ids.TASK_MANIFEST: retry(2),  # writes the same manifest again
    # the baseline's fork is the cut the stop window took (returned as it is); in savepoint/existing mode a
    # copy whose retry removes its own leftovers or finds the fork complete
    ids.fork_task("baseline"): retry(1),
    # a copy's retry removes its own leftovers (same fork id) or finds the fork complete
    **{ids.fork_task(v): retry(1) for v in _ALL_VARIANTS if v != "baseline"},
    ids.TASK_ISOLATE_ACTION_STATE: retry(2),  # reuses the empty topics an earlier try created
    ids.TASK_REPLAY_FROM: retry(2),  # reads XComs only
    # production still runs: a retry runs one more delta round (or removes its own leftovers first)
    ids.TASK_PRECOPY_MEMORY: retry(1),
    # a retried submission would submit again into the outputs and action-state topic of a failed or lost
    # job (duplicated outputs): the run fails and is run again instead
    ids.TASK_SUBMIT_REPLAYS: NO_RETRY,
    # waiting only reads the job's state and collects its files: a retry attaches to the same Flink job
    **{ids.replay_task(v): retry(1, delay_s=5) for v in _ALL_VARIANTS},
    ids.TASK_COMPARE: NO_RETRY,  # deterministic on its inputs: a retry gives the same verdict
    ids.TASK_APPROVE: NO_RETRY,  # nothing transient in it
    ids.TASK_VERIFY_PRODUCTION_MEMORY: retry(2),  # read-only
    # cancelling twice is harmless; backs off for the ~1 min a restarting replay JobManager takes
    ids.TASK_CANCEL_LEFTOVER_REPLAYS: retry(3, backoff=True),
    ids.TASK_DELETE_REPLAY_TOPICS: retry(2),  # a topic already gone counts as deleted
    # dropping a dropped fork is a no-op. Two retries 10 s apart: a store down longer than that leaves a
    # partial fork's tagged copies behind (later runs use other namespaces; `DropMem0ForkOperator` on
    # that namespace removes them). Longer backoff was tried: with the store down for the whole run (the
    # fork drill) the three drops held the run ~14 minutes.
    ids.TASK_DROP_FORKS: retry(2),
    ids.TASK_ASSERT_PRODUCTION: retry(2, delay_s=5),  # read-only; a real finding fails at once
    ids.TASK_RUN_RECORD: NO_RETRY,  # it fails on purpose when a step failed: a retry fails the same way
}


@task.branch(task_id=ids.TASK_CHOOSE_START)
def choose_start(mode: str) -> str:
    """``existing`` reuses an earlier savepoint and window; every other mode takes a new savepoint."""
    return ids.TASK_REUSE_MANIFEST if mode == "existing" else ids.TASK_OFFSETS_BEFORE_QUIESCE


@task(task_id=ids.TASK_REPLAY_FROM, multiple_outputs=True)
def replay_from() -> dict[str, Any]:
    """The savepoint and production plan the replays start from: this run's quiesce, or the reused
    manifest's (read here, not as arguments, so a skipped branch does not skip the replays)."""
    ti = get_current_context()["ti"]
    reused = ti.xcom_pull(task_ids=ids.TASK_REUSE_MANIFEST)
    if reused:
        return {
            ids.XCOM_SAVEPOINT_PATH_KEY: reused["savepoint_path"],
            ids.XCOM_PRODUCTION_PLAN_KEY: reused["production_plan"],
        }
    quiesced = ti.xcom_pull(task_ids=ids.TASK_QUIESCE)
    if not quiesced or not ti.xcom_pull(task_ids=ids.TASK_MANIFEST):
        raise AirflowFailException(
            "no savepoint and manifest to replay: neither quiesce+manifest nor reuse_manifest produced one "
            "(see their task logs)"
        )
    return {
        ids.XCOM_SAVEPOINT_PATH_KEY: quiesced["savepoint_path"],
        ids.XCOM_PRODUCTION_PLAN_KEY: ti.xcom_pull(task_ids=ids.TASK_PREFLIGHT, key=ids.XCOM_PRODUCTION_DETAILS_KEY),
    }


@dataclass(frozen=True)
class Capture:
    """Preflight, the savepoint (new: quiesce; or reused: reuse_manifest), resume, window, manifest."""

    preflight: Task
    agent_check: Task
    start: Task
    offsets_before: Task
    quiesce: Task
    start_offsets: Task
    reuse: Task
    resume: Task
    window: Task
    manifest: Task


def production_lease(spec: ReplaySpec) -> LeaseSettings:
    """Production's lease (one run of this production at a time), as the quiesce, the resume and the production
    check take it: taken before the stop, released once production RUNS again; a second run waits
    ``lease_wait_minutes``, then fails touching nothing."""
    return LeaseSettings(folder=lease_folder(spec.runs_uri), wait=spec.lease_wait_minutes * 60)


def quiesce_of(run: Any, preflight: Any, quiesce: Any) -> QuiesceRef:
    """This run's quiesce as the resume and the production check answer for it: its result, the run's mode,
    production's job id before it (preflight's; None in a task that runs although preflight did not) and its task."""
    return QuiesceRef(
        result=quiesce.output,
        mode=run[ids.XCOM_QUIESCE_MODE_KEY],
        production_job_id=preflight.output[ids.XCOM_JOB_ID_KEY],
        task_id=ids.TASK_QUIESCE,
    )


def stop_window(spec: ReplaySpec, run: Any, job_id: Any, offsets_before: Any) -> Any:
    """Production's whole stop window in one task (``quiesce``): stop, offsets, memory cut, resubmit, RUNNING."""
    prod = spec.production
    return StopWindowOperator(
        task_id=ids.TASK_QUIESCE,
        job_id=job_id,
        mode=run[ids.XCOM_QUIESCE_MODE_KEY],
        target_directory=spec.savepoint_dir,
        flink_conn_id=spec.flink_conn_id,
        capture_topic=prod.capture_topic,
        offsets_before=offsets_before.output,
        kafka_config_id=spec.kafka_conn_id,
        output_topic=prod.output_topic,
        cassette_topic=prod.cassette_topic,
        memory_source=run[ids.XCOM_MEMORY_SOURCE_KEY],
        memory_target=run[ids.fork_key("baseline")],
        memory_journal_topic=prod.memory_journal_topic,
        mem0_conn_id=spec.mem0_conn_id,
        program=prod.program,
        job_name=prod.job_name,
        lease=production_lease(spec),
    )


def capture(spec: ReplaySpec, run: Any) -> Capture:
    """Stage capture. ``quiesce`` is production's whole stop window (:class:`StopWindowOperator`: the savepoint,
    the start offsets, the baseline's memory cut and the resubmission in one task), so no scheduling latency
    lands in the downtime; ``start_offsets``, the memory stage's baseline fork and ``resume`` (``all_done``) then
    return what the window did, and do the step themselves only when the window did not (``savepoint`` mode;
    a window that failed before production ran again)."""
    prod = spec.production
    preflight: Any = ReplayPreflightOperator(task_id=ids.TASK_PREFLIGHT, spec=run[ids.XCOM_SPEC_KEY])
    job_id = preflight.output[ids.XCOM_JOB_ID_KEY]  # None in a task that runs although preflight did not
    # both job definitions imported, planned and tried on captured records on the job side, before any stop
    agent_check = AgentCheckOperator(
        task_id=ids.TASK_AGENT_CHECK,
        spec=run[ids.XCOM_SPEC_KEY],
        production_details=preflight.output[ids.XCOM_PRODUCTION_DETAILS_KEY],
    )
    start = choose_start(run[ids.XCOM_QUIESCE_MODE_KEY])
    offsets_before: Any = RecordStartOffsetsOperator(
        task_id=ids.TASK_OFFSETS_BEFORE_QUIESCE, topic=prod.capture_topic, kafka_config_id=spec.kafka_conn_id
    )
    quiesce = stop_window(spec, run, job_id, offsets_before)
    start_offsets: Any = RecordStartOffsetsOperator(
        task_id=ids.TASK_START_OFFSETS,
        topic=prod.capture_topic,
        quiesce_result=quiesce.output,
        offsets_before=offsets_before.output,
        kafka_config_id=spec.kafka_conn_id,
        output_topic=prod.output_topic,
        cassette_topic=prod.cassette_topic,
    )
    reuse: Any = ReuseManifestOperator(
        task_id=ids.TASK_REUSE_MANIFEST,
        existing_manifest=run[ids.XCOM_EXISTING_MANIFEST_KEY],
        existing_savepoint=run[ids.XCOM_EXISTING_SAVEPOINT_KEY],
        manifest_uri=run[ids.XCOM_MANIFEST_URI_KEY],
        expected_topic=prod.capture_topic,
        expected_job_name=prod.job_name,
        kafka_config_id=spec.kafka_conn_id,
        manifest_sources=spec.allowed_manifest_sources(),
        signing_conn_id=spec.manifest_signing_conn_id,
    )
    resume = ResumeJobOperator(
        task_id=ids.TASK_RESUME_PRODUCTION,
        program=prod.program,
        quiesce=quiesce_of(run, preflight, quiesce),
        job_name=prod.job_name,
        flink_conn_id=spec.flink_conn_id,
        lease=production_lease(spec),
        trigger_rule="all_done",
    )
    window: Any = CaptureWindowSensor(
        task_id=ids.TASK_CAPTURE_WINDOW,
        start_offsets=start_offsets.output,
        min_records=run[ids.XCOM_WINDOW_RECORDS_KEY],
        duration_seconds=run[ids.XCOM_WINDOW_SECONDS_KEY],
        kafka_config_id=spec.kafka_conn_id,
        poll_interval=1.0,
        window_timeout=spec.window.timeout_minutes * 60,
    )
    manifest: Any = CreateReplayManifestOperator(
        task_id=ids.TASK_MANIFEST,
        manifest_uri=run[ids.XCOM_MANIFEST_URI_KEY],
        window=window.output,
        production=quiesce.output,
        start_offsets=start_offsets.output,
        kafka_config_id=spec.kafka_conn_id,
        # production's event time and watermark strategy: the replay jobs take theirs from the manifest
        capture_format=CaptureFormat(
            event_time=prod.event_time.model_dump(mode="json"), watermark=prod.watermark.model_dump(mode="json")
        ),
        production_facts=ProductionFacts(agent_uid=prod.agent_uid),
        signing_conn_id=spec.manifest_signing_conn_id,
    )
    run >> preflight >> agent_check >> start >> [offsets_before, reuse]
    offsets_before >> quiesce >> start_offsets
    resume >> window >> manifest
    return Capture(
        preflight, agent_check, start, offsets_before, quiesce, start_offsets, reuse, resume, window, manifest
    )


@dataclass(frozen=True)
class Memory:
    """The baseline's pre-copy, and the memory forks, one per variant, in the spec's variant order
    (:meth:`ReplaySpec.variant_names`: the baseline's first)."""

    precopy: Task
    forks: list[Task]


def memory(spec: ReplaySpec, run: Any, cap: Capture) -> Memory:
    """Stage memory. The baseline forks the source; every other variant (baseline-2, the extra A/A baselines
    of ``aa_replays``, the candidate) copies that fork, so all start from the same memories even when
    production keeps writing (savepoint, existing modes).
    ``precopy`` copies the baseline's source before anything is stopped, so the baseline's fork, inside
    production's stop window, copies only what changed since (docs/memory-fork.md)."""
    precopy = PrecopyMem0NamespaceOperator(
        task_id=ids.TASK_PRECOPY_MEMORY,
        source=run[ids.XCOM_MEMORY_SOURCE_KEY],
        target=run[ids.fork_key("baseline")],
        mem0_conn_id=spec.mem0_conn_id,
        memory_journal_topic=spec.production.memory_journal_topic,
        kafka_config_id=spec.kafka_conn_id,
    )
    forks = [
        ForkMem0NamespaceOperator(
            task_id=ids.fork_task(variant),
            source=run[ids.XCOM_MEMORY_SOURCE_KEY] if variant == "baseline" else run[ids.fork_key("baseline")],
            target=run[ids.fork_key(variant)],
            mem0_conn_id=spec.mem0_conn_id,
            trigger_rule="none_failed_min_one_success",  # after start_offsets or reuse_manifest
            stop_window=cap.quiesce.output if variant == "baseline" else None,  # the cut taken in the window
        )
        for variant in spec.variant_names()
    ]
    forks[0] >> forks[1:]
    return Memory(precopy, forks)


@dataclass(frozen=True)
class Replay:
    """The isolated action-state topics, the replays' origin (savepoint + plan), the variants checked and
    submitted together, and one wait per variant (in the spec's variant order)."""

    isolate: Task
    origin: Task
    submit: Task
    replays: list[Task]


def replay(spec: ReplaySpec, run: Any, *, changed: Any = None) -> Replay:
    """Stage replay: isolate action state, pick the origin, check every variant against production's plan
    (the identity preflight) and submit them all in one job-side run, then wait for each. ``changed``: the
    agent check's changed resources (an XComArg), which the candidate's replay never serves production's
    cassette.

    All the jobs are submitted before any is waited for, so they run at the same time on the replay cluster
    whether the tasks run in parallel (a real executor) or one after another (``dag.test``); one program for the
    check and the submissions of all of them costs one Python start on the JobManager, which runs one at a
    time."""
    prod = spec.production
    variants = spec.variant_names()
    isolate: Any = IsolateActionStateOperator(
        task_id=ids.TASK_ISOLATE_ACTION_STATE,
        production_topic=prod.action_state_topic,
        variants=variants,
        topics=run[ids.XCOM_TOPICS_KEY],
        result_topics=run[ids.XCOM_RESULT_TOPICS_KEY],
        partitions=prod.action_state_partitions,
        manifest_uri=run[ids.XCOM_MANIFEST_URI_KEY],
        signing_conn_id=spec.manifest_signing_conn_id,
        kafka_config_id=spec.kafka_conn_id,
        trigger_rule="none_failed_min_one_success",  # after manifest or reuse_manifest
    )
    origin: Any = replay_from()
    replay_conn = spec.replay_flink_conn_id or spec.flink_conn_id
    submit: Any = SubmitReplayJobsOperator(
        task_id=ids.TASK_SUBMIT_REPLAYS,
        specs=[run[ids.job_spec_key(variant)] for variant in variants],
        savepoint_path=origin[ids.XCOM_SAVEPOINT_PATH_KEY],
        production_plan=origin[ids.XCOM_PRODUCTION_PLAN_KEY],
        production_agent_uid=prod.agent_uid,
        changed_resources=changed,
        flink_conn_id=replay_conn,
        kafka_config_id=spec.kafka_conn_id,
        compare_key=spec.compare_key,
        window_tie=spec.window.outputs_tied_by,
        capacity_timeout=spec.capacity_wait_minutes * 60,
    )
    replays = [
        AwaitReplayJobOperator(
            task_id=ids.replay_task(variant),
            spec=run[ids.job_spec_key(variant)],
            submitted=submit.output,
            flink_conn_id=replay_conn,
            kafka_config_id=spec.kafka_conn_id,
            timeout=spec.replay_timeout_minutes * 60,
        )
        for variant in variants
    ]
    isolate >> origin >> submit
    return Replay(isolate, origin, submit, replays)


def compared_runs(spec: ReplaySpec, run: Any) -> ComparedRuns:
    """Every variant's outputs and audit as the ``resolve`` task placed them; the extra A/A baselines
    (``aa_replays`` above 1) after baseline-2, in order."""
    extra = spec.extra_baselines()
    return ComparedRuns(
        baseline=run[ids.output_key("baseline")],
        candidate=run[ids.output_key("candidate")],
        baseline_2=run[ids.output_key("baseline_2")],
        extra_baselines=[run[ids.output_key(v)] for v in extra],
        baseline_audit=run[ids.audit_key("baseline")],
        baseline_2_audit=run[ids.audit_key("baseline_2")],
        extra_baseline_audits=[run[ids.audit_key(v)] for v in extra],
        candidate_audit=run[ids.audit_key("candidate")],
    )


@dataclass(frozen=True)
class Compare:
    """The comparison (the gate's verdict) and, in the gate, the approval that emits the Asset."""

    compare: Task
    approve: Task | None


def compare(spec: ReplaySpec, run: Any, *, gate: bool, changed: Any = None) -> Compare:
    """Stage compare. A gate fails on FAIL and INCONCLUSIVE; PASS runs ``approve`` (outlet: the Asset).
    ``changed``: the agent check's changed resources (an XComArg), listed in the report. The extra A/A baselines
    (``aa_replays`` above 1) come after baseline-2, in order: the noise is measured on more pairs of baselines."""
    comparison = CompareReplayOutputsOperator(
        task_id=ids.TASK_COMPARE,
        runs=compared_runs(spec, run),
        changed_resources=changed,
        key=spec.compare_key,
        config=run[ids.XCOM_COMPARE_CONFIG_KEY],
        manifest_uri=run[ids.XCOM_MANIFEST_URI_KEY],
        signing_conn_id=spec.manifest_signing_conn_id,
        report=ReportSettings(gate=gate, fail_on_inconclusive=gate),
        fidelity=FidelitySettings(output_topic=spec.production.output_topic, kafka_conn_id=spec.kafka_conn_id),
        submit_task_id=ids.TASK_SUBMIT_REPLAYS,
    )
    if not gate:
        return Compare(comparison, None)

    @task(task_id=ids.TASK_APPROVE, outlets=[approved_asset(spec)])
    def approve() -> str:
        return f"{spec.name}: candidate approved"

    approval = approve()
    comparison >> approval
    return Compare(comparison, approval)


@dataclass(frozen=True)
class Cleanup:
    """Everything that runs ``all_done`` after the replays: the production check, then the run record last."""

    verify: Task
    cancel: Task
    delete_topics: Task
    drops: Task
    assert_production: Task
    record: Task


def cleanup(spec: ReplaySpec, run: Any, *, isolate: Any, cap: Capture) -> Cleanup:
    """Stage cleanup: verify production's memory, cancel leftover replays, delete the replay topics, drop the
    forks (unless kept), assert production runs again from this run's savepoint (or was never touched),
    write the run record (which fails the run if any step failed)."""
    verify = VerifyMem0UntouchedOperator(
        task_id=ids.TASK_VERIFY_PRODUCTION_MEMORY,
        target=run[ids.fork_key("baseline")],
        mem0_conn_id=spec.mem0_conn_id,
        trigger_rule="all_done",
    )
    cancel = CancelLeftoverReplaysOperator(
        task_id=ids.TASK_CANCEL_LEFTOVER_REPLAYS,
        flink_conn_id=spec.replay_flink_conn_id or spec.flink_conn_id,
        variants=spec.variant_names(),
        trigger_rule="all_done",
    )
    delete_topics = DeleteReplayTopicsOperator(
        task_id=ids.TASK_DELETE_REPLAY_TOPICS,
        isolation=isolate.output,
        topics=run[ids.XCOM_TOPIC_LIST_KEY],  # also when isolate failed after creating some of them
        production_topic=spec.production.action_state_topic,
        kafka_config_id=spec.kafka_conn_id,
    )
    drops = DropMem0ForksOperator(
        task_id=ids.TASK_DROP_FORKS,
        namespaces={variant: run[ids.fork_key(variant)] for variant in spec.variant_names()},
        keep=run[ids.XCOM_KEEP_FORK_KEY],
        mem0_conn_id=spec.mem0_conn_id,
    )
    assert_production = AssertProductionOperator(
        task_id=ids.TASK_ASSERT_PRODUCTION,
        job_name=spec.production.job_name,
        quiesce=quiesce_of(run, cap.preflight, cap.quiesce),
        program=spec.production.program,
        flink_conn_id=spec.flink_conn_id,
        lease=production_lease(spec),  # never prescribes a restore while another run holds it
        trigger_rule="all_done",
    )
    record = RunRecordOperator(
        task_id=ids.TASK_RUN_RECORD, spec_name=spec.name, variants=spec.variant_names(), trigger_rule="all_done"
    )
    cancel >> delete_topics >> drops
    drops >> assert_production >> record
    return Cleanup(verify, cancel, delete_topics, drops, assert_production, record)


def _apply_retries(*stages: Any) -> None:
    """Give every task of ``stages`` its :data:`RETRIES` entry."""
    for stage in stages:
        for value in vars(stage).values():
            for task_ in value if isinstance(value, list) else [value]:
                operator: Any = getattr(task_, "operator", task_)  # a decorated task's XComArg
                if operator is None:  # a stage's optional task (compare's approve outside the gate)
                    continue
                for name, setting in RETRIES[operator.task_id].items():
                    setattr(operator, name, setting)


def wire(cap: Capture, mem: Memory, rep: Replay, cmp: Compare, cln: Cleanup) -> None:
    """The edges between stages, and every task's retries (:data:`RETRIES`)."""
    _apply_retries(cap, mem, rep, cmp, cln)
    # the pre-copy runs after the checks and before anything is stopped (every mode: the fork finds it)
    cap.agent_check >> mem.precopy >> cap.start
    # only the baseline's fork reads production's namespace: production resumes right after it, and the
    # copies of that fork (every other variant's) run while production is already back.
    cap.start_offsets >> mem.forks[0] >> cap.resume
    cap.reuse >> mem.forks
    # resume runs whatever happened (all_done); the replay chain goes on only if every fork succeeded.
    mem.forks >> cap.window
    cap.manifest >> rep.isolate
    [cap.reuse, *mem.forks] >> rep.isolate
    rep.replays >> cmp.compare
    rep.replays >> cln.verify
    rep.replays >> cln.cancel
    [cmp.compare, cln.verify] >> cln.cancel

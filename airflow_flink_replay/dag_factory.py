"""Build the replay DAGs from a :class:`ReplaySpec`: UI-triggered, nightly, and the pre-release gate.

One chain (DESIGN.md §3), three front doors::

    resolve → preflight → choose_start ─┬→ offsets_before_quiesce → quiesce → start_offsets
                                        └→ reuse_manifest (quiesce_mode=existing)
      → fork_memory_baseline ─┬→ resume_production (all_done) → capture_window → manifest
                              └→ fork_memory_{baseline_2,candidate} (copies of the baseline's fork)
      → isolate_action_state → replay_from → replay (x3) → compare (gate) → [approve (gate: Asset on PASS)]
    cleanup (all_done): verify production memory, cancel leftover replays, delete replay topics,
      drop the forks (unless kept), write the run record.

Quiesce modes: ``drain`` / ``stop`` stop production with a savepoint (an exact boundary); ``savepoint``
keeps it running (the capture offsets read before and after the savepoint bound the records that raced
it); ``existing`` replays an earlier run's savepoint and window again (``existing_manifest``) and never
touches production — the capture and resume tasks are skipped.

Each replay variant gets its own memory fork and action-state topic: a baseline's memory writes must not
reach the candidate. In drain/stop modes the forks are taken while production is stopped (the savepoint
instant) — only the baseline's fork holds production stopped: baseline-2 and the candidate copy that frozen
fork while production is already running again, so the three start from the same memories in every mode.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import Any, Literal

from airflow.sdk import DAG, Asset, Param, XComArg, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_spec import VARIANTS, ReplaySpec
from airflow_flink_replay.operators.action_state import DeleteReplayTopicsOperator, IsolateActionStateOperator
from airflow_flink_replay.operators.compare import CompareReplayOutputsOperator
from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator, ResumeJobOperator
from airflow_flink_replay.operators.manifest import (
    CreateReplayManifestOperator,
    RecordStartOffsetsOperator,
    ReuseManifestOperator,
)
from airflow_flink_replay.operators.mem0 import (
    DropMem0ForkOperator,
    ForkMem0NamespaceOperator,
    VerifyMem0UntouchedOperator,
)
from airflow_flink_replay.operators.preflight import ReplayPreflightOperator, run_tag
from airflow_flink_replay.operators.replay import SubmitReplayJobOperator, collected_files
from airflow_flink_replay.sensors.capture_window import CaptureWindowSensor

Kind = Literal["manual", "nightly", "gate"]


def approved_asset(spec: ReplaySpec) -> Asset:
    """The Asset the gate emits on PASS: ``flink-agents-replay://<spec name>/approved``."""
    return Asset(f"flink-agents-replay://{spec.name}/approved")


def run_params(spec: ReplaySpec) -> dict[str, Param]:
    """The Params form of the UI-triggered DAG (defaults from the spec)."""
    return {
        "candidate": Param(
            spec.candidate_agent_factory or "", type="string", title="Candidate agent",
            description='"module:attr" of the candidate agent factory (empty: production\'s agent, an A/A run)',
        ),
        "quiesce_mode": Param(
            spec.quiesce_mode, enum=["drain", "stop", "savepoint", "existing"], title="Quiesce mode",
            description="drain: finish in-flight agent runs before the savepoint (production stops briefly); "
            "stop: no drain (use it when production has event-time windows or timers); savepoint: no stop, no "
            "downtime (records racing the savepoint are not replayed, in-flight runs may be inside); existing: "
            "replay an earlier run's savepoint and window again (give its manifest below)",
        ),
        "existing_manifest": Param(
            spec.existing_manifest or "", type="string", title="Earlier manifest (quiesce mode existing)",
            description="URI of an earlier run's manifest.json (its run_record.json names it)",
        ),
        "existing_memory": Param(
            spec.existing_memory or "", type="string", title="Memory to fork (quiesce mode existing)",
            description="Mem0 namespace the forks copy; empty: production's namespace as it is now",
        ),
        "window_records": Param(spec.window.records or 40, type="integer", minimum=1, title="Window (records)"),
        "window_minutes": Param(
            spec.window.minutes, type=["null", "number"], exclusiveMinimum=0, title="Window (minutes)",
            description="optional: close the window after this long even if fewer records arrived",
        ),
        "abs_threshold": Param(spec.compare.abs_threshold, type="number", minimum=0, maximum=1,
                               title="Absolute margin over noise"),
        "rel_threshold": Param(spec.compare.rel_threshold, type="number", minimum=0, title="Relative margin"),
        "min_aligned": Param(spec.compare.min_aligned, type="integer", minimum=1, title="Min aligned outputs"),
        "keep_fork": Param(spec.keep_fork, type="boolean", title="Keep the memory forks for debugging"),
    }


def resolve_run(spec: ReplaySpec, overrides: dict[str, Any], dag_id: str, tag: str) -> dict[str, Any]:
    """Everything the run's tasks take, flattened into XCom keys (pure; unit-tested)."""
    run = spec.with_run_overrides(overrides)
    if not run.candidate_agent_factory:
        run = run.model_copy(update={"candidate_agent_factory": run.production.agent_factory})
    run_dir = Path(run.runs_uri.removeprefix("file://")) / dag_id / tag
    manifest = run_dir / "manifest.json"
    out: dict[str, Any] = {
        "spec": run.model_dump(mode="json"),
        "run_tag": tag,
        "run_dir": str(run_dir),
        "manifest_uri": f"file://{manifest}",
        "quiesce_mode": run.quiesce_mode,
        "existing_manifest": run.existing_manifest or "",
        "existing_savepoint": run.existing_savepoint or "",
        "memory_source": run.memory_source(),
        "window_records": run.window.records,
        "window_seconds": run.window.minutes * 60 if run.window.minutes else None,
        "keep_fork": run.keep_fork,
        "compare_config": run.compare.model_dump(mode="json"),
        "topics": {v: run.action_state_topic(tag, v) for v in VARIANTS},
        "topic_list": [run.action_state_topic(tag, v) for v in VARIANTS],
    }
    prod = run.production
    for variant in VARIANTS:
        output_dir = run_dir / variant / "output-parts"
        output, audit = collected_files(str(output_dir), variant)
        out[f"fork_{variant}"] = run.fork_namespace(tag, variant)
        out[f"output_{variant}"] = str(output)
        out[f"audit_{variant}"] = str(audit)
        out[f"job_spec_{variant}"] = ReplayJobSpec(
            variant=variant,
            agent_factory=run.agent_factory_for(variant),
            job_identifier=run.fork_namespace(tag, variant),
            action_state_topic=run.action_state_topic(tag, variant),
            output_dir=str(output_dir),
            audit_dir=str(run_dir / variant / "audit-parts"),
            kafka_bootstrap=run.kafka_bootstrap,
            manifest=str(manifest),
            policy=run.policy,
            agent_uid=prod.agent_uid,
            max_parallelism=prod.max_parallelism,
            action_state_partitions=prod.action_state_partitions,
            mem0_config=run.mem0_config,
            key_field=prod.key_field,
            connector_jars=run.connector_jars,
        ).model_dump(mode="json")
    return out


def build_replay_dag(
    spec: ReplaySpec,
    *,
    dag_id: str,
    kind: Kind = "manual",
    schedule: Any = None,
    tags: list[str] | None = None,
    default_args: dict[str, Any] | None = None,
) -> DAG:
    """Build one replay DAG for ``spec`` (see the module doc for the chain)."""
    gate = kind == "gate"
    doc = {
        "manual": "Replay production's last window with a candidate agent (Params form).",
        "nightly": "Nightly: baseline vs baseline-2 on the last window (noise floor, drift), candidate if configured.",
        "gate": "Pre-release gate, triggered over the REST API with `conf.candidate`: FAIL fails the run, PASS "
        f"emits the Asset {approved_asset(spec).uri}.",
    }[kind]
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=None if schedule is None else _epoch(),
        catchup=False,
        max_active_runs=1,
        params=run_params(spec) if kind == "manual" else {},
        tags=["flink-agents", "replay", *(tags or [])],
        doc_md=doc,
        default_args={"retries": 0, "retry_delay": timedelta(seconds=10), **(default_args or {})},
    ) as dag:

        @task(multiple_outputs=True)
        def resolve() -> dict[str, Any]:
            ctx = get_current_context()
            overrides = {**(ctx["params"] or {}), **((ctx["dag_run"].conf or {}) if ctx.get("dag_run") else {})}
            return resolve_run(spec, overrides, dag_id, run_tag(ctx))

        run: Any = resolve()  # an XComArg: run[key] pulls that key of the resolved run
        preflight: Any = ReplayPreflightOperator(task_id="preflight", spec=run["spec"])

        @task.branch
        def choose_start(mode: str) -> str:
            """``existing`` reuses an earlier savepoint and window; every other mode takes a new savepoint."""
            return "reuse_manifest" if mode == "existing" else "offsets_before_quiesce"

        start = choose_start(run["quiesce_mode"])
        offsets_before: Any = RecordStartOffsetsOperator(
            task_id="offsets_before_quiesce", topic=spec.production.capture_topic, kafka_config_id=spec.kafka_conn_id
        )
        quiesce: Any = QuiesceAndSavepointOperator(
            task_id="quiesce",
            job_id=_pull(preflight, "job_id"),
            mode=run["quiesce_mode"],
            target_directory=spec.savepoint_dir,
            flink_conn_id=spec.flink_conn_id,
        )
        start_offsets: Any = RecordStartOffsetsOperator(
            task_id="start_offsets",
            topic=spec.production.capture_topic,
            quiesce_result=quiesce.output,
            offsets_before=offsets_before.output,
            kafka_config_id=spec.kafka_conn_id,
        )
        reuse: Any = ReuseManifestOperator(
            task_id="reuse_manifest",
            existing_manifest=run["existing_manifest"],
            existing_savepoint=run["existing_savepoint"],
            manifest_uri=run["manifest_uri"],
            expected_topic=spec.production.capture_topic,
            expected_job_name=spec.production.job_name,
            kafka_config_id=spec.kafka_conn_id,
        )
        # baseline forks the source; baseline-2 and the candidate copy that fork, so all three start from
        # the same memories even when production keeps writing (savepoint mode, existing mode).
        forks = [
            ForkMem0NamespaceOperator(
                task_id=f"fork_memory_{variant}",
                source=run["memory_source"] if variant == "baseline" else run["fork_baseline"],
                target=run[f"fork_{variant}"],
                mem0_conn_id=spec.mem0_conn_id,
                trigger_rule="none_failed_min_one_success",  # after start_offsets or reuse_manifest
            )
            for variant in VARIANTS
        ]
        forks[0] >> forks[1:]
        resume = ResumeJobOperator(
            task_id="resume_production",
            program=spec.production.program,
            quiesce_result=quiesce.output,
            production_job_id="{{ ti.xcom_pull(task_ids='preflight', key='job_id') or '' }}",
            job_name=spec.production.job_name,
            flink_conn_id=spec.flink_conn_id,
            quiesce_mode=run["quiesce_mode"],
            trigger_rule="all_done",
        )
        window: Any = CaptureWindowSensor(
            task_id="capture_window",
            start_offsets=start_offsets.output,
            min_records=run["window_records"],
            duration_seconds=run["window_seconds"],
            kafka_config_id=spec.kafka_conn_id,
            poll_interval=1.0,
            window_timeout=spec.window.timeout_minutes * 60,
        )
        manifest: Any = CreateReplayManifestOperator(
            task_id="manifest",
            manifest_uri=run["manifest_uri"],
            window=window.output,
            production=quiesce.output,
            start_offsets=start_offsets.output,
            kafka_config_id=spec.kafka_conn_id,
            agent_uid=spec.production.agent_uid,
            # production's event time and watermark strategy: the replay jobs take theirs from the manifest
            event_time=spec.production.event_time.model_dump(mode="json"),
            watermark=spec.production.watermark.model_dump(mode="json"),
        )
        isolate: Any = IsolateActionStateOperator(
            task_id="isolate_action_state",
            production_topic=spec.production.action_state_topic,
            variants=list(VARIANTS),
            topics=run["topics"],
            partitions=spec.production.action_state_partitions,
            manifest_uri=run["manifest_uri"],
            kafka_config_id=spec.kafka_conn_id,
            trigger_rule="none_failed_min_one_success",  # after manifest or reuse_manifest
        )

        @task(multiple_outputs=True)
        def replay_from() -> dict[str, Any]:
            """The savepoint and production plan the replays start from: this run's quiesce, or the reused
            manifest's (read here, not as arguments, so a skipped branch does not skip the replays)."""
            ti = get_current_context()["ti"]
            reused = ti.xcom_pull(task_ids="reuse_manifest")
            if reused:
                return {"savepoint_path": reused["savepoint_path"], "production_plan": reused["production_plan"]}
            quiesced = ti.xcom_pull(task_ids="quiesce")
            if not quiesced or not ti.xcom_pull(task_ids="manifest"):
                raise AirflowFailException(
                    "no savepoint and manifest to replay: neither quiesce+manifest nor reuse_manifest produced one "
                    "(see their task logs)"
                )
            return {
                "savepoint_path": quiesced["savepoint_path"],
                "production_plan": ti.xcom_pull(task_ids="preflight", key="production_details"),
            }

        origin: Any = replay_from()
        replays = [
            SubmitReplayJobOperator(
                task_id=f"replay_{variant}",
                spec=run[f"job_spec_{variant}"],
                savepoint_path=origin["savepoint_path"],
                production_plan=origin["production_plan"],
                production_agent_uid=spec.production.agent_uid,
                flink_conn_id=spec.replay_flink_conn_id or spec.flink_conn_id,
                timeout=spec.replay_timeout_minutes * 60,
            )
            for variant in VARIANTS
        ]
        compare = CompareReplayOutputsOperator(
            task_id="compare",
            baseline=run["output_baseline"],
            baseline_2=run["output_baseline_2"],
            candidate=run["output_candidate"],
            baseline_audit=run["audit_baseline"],
            baseline_2_audit=run["audit_baseline_2"],
            candidate_audit=run["audit_candidate"],
            key=spec.compare_key,
            config=run["compare_config"],
            manifest_uri=run["manifest_uri"],
            gate=gate,
            fail_on_inconclusive=gate,
        )
        verify = VerifyMem0UntouchedOperator(
            task_id="verify_production_memory",
            target=run["fork_baseline"],
            mem0_conn_id=spec.mem0_conn_id,
            trigger_rule="all_done",
        )

        @task(trigger_rule="all_done")
        def cancel_leftover_replays() -> list[str]:
            from airflow_flink_replay.hooks.flink_rest import FlinkRestHook

            ctx = get_current_context()
            ti = ctx["ti"]
            hook = FlinkRestHook(spec.replay_flink_conn_id or spec.flink_conn_id)
            prefix = f"afr-replay-{ti.dag_id}-{ti.run_id}-"
            cancelled = []
            for job in hook.list_jobs().jobs:
                if job.name.startswith(prefix) and job.state not in ("FINISHED", "FAILED", "CANCELED"):
                    hook.cancel_job(job.jid)
                    cancelled.append(job.jid)
            return cancelled

        cancel = cancel_leftover_replays()
        delete_topics = DeleteReplayTopicsOperator(
            task_id="delete_replay_topics",
            isolation=isolate.output,
            topics=run["topic_list"],  # also when isolate failed after creating some of them
            production_topic=spec.production.action_state_topic,
            kafka_config_id=spec.kafka_conn_id,
        )
        drops = [
            DropMem0ForkOperator(
                task_id=f"drop_fork_{variant}",
                namespace=run[f"fork_{variant}"],
                keep=run["keep_fork"],
                mem0_conn_id=spec.mem0_conn_id,
            )
            for variant in VARIANTS
        ]

        @task(trigger_rule="all_done")
        def run_record() -> dict[str, Any]:
            """Write the run record; then fail the run if any step failed (cleanup tasks alone would pass it)."""
            from airflow_flink_replay.run_record_writer import write_run_record

            ctx = get_current_context()
            summary = write_run_record(ctx, spec.name, [f"replay_{v}" for v in VARIANTS])
            for key, value in summary.items():
                ctx["ti"].xcom_push(key=key, value=value)
            if summary["failed_tasks"]:
                raise AirflowFailException(
                    f"replay run failed at {', '.join(summary['failed_tasks'])} (verdict: {summary['verdict']}); "
                    f"run record: {summary['run_record']}"
                )
            return summary

        record = run_record()

        run >> preflight >> start >> [offsets_before, reuse]
        # only the baseline's fork reads production's namespace: production resumes right after it, and the
        # two copies of that fork run while production is already back.
        offsets_before >> quiesce >> start_offsets >> forks[0] >> resume >> window >> manifest >> isolate
        reuse >> forks
        # resume runs whatever happened (all_done); the replay chain goes on only if every fork succeeded.
        forks >> window
        [reuse, *forks] >> isolate >> origin >> replays >> compare
        replays >> verify
        for r in replays:
            r >> cancel
        [compare, verify] >> cancel >> delete_topics >> drops
        for d in drops:
            d >> record
        if gate:

            @task(outlets=[approved_asset(spec)])
            def approve() -> str:
                return f"{spec.name}: candidate approved"

            compare >> approve()
    return dag


def _pull(task: Any, key: str) -> Any:
    """The XCom ``key`` of ``task``, resolved when the consuming task runs."""
    return XComArg(task, key=key)


def _epoch() -> Any:
    from datetime import datetime

    return datetime(2026, 1, 1, tzinfo=UTC)


def load_spec(path: str | Path | None = None) -> ReplaySpec:
    """The spec for the DAG files: ``path``, ``$FLINK_REPLAY_SPEC``, or the demo's spec in ``.stack/``."""
    import os

    candidates = [path, os.environ.get("FLINK_REPLAY_SPEC"),
                  Path(__file__).resolve().parent.parent / ".stack" / "demo" / "replay_spec.yaml"]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return ReplaySpec.from_yaml(candidate)
    raise FileNotFoundError(
        "no replay spec: set FLINK_REPLAY_SPEC to a ReplaySpec YAML (see docs/operators.md), or run "
        "`flink-replay demo setup` to write the demo's"
    )

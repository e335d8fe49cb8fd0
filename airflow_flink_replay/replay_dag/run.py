"""The run's values: the Params form, the resolve task (spec + form/conf → one XCom key per value), the Asset.

Every later task takes the resolved values as XComArgs (``run[ids.XCOM_..._KEY]``), resolved when it runs.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, Param, get_current_context, task

from airflow_flink_replay import ids
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.operators.preflight import run_tag
from airflow_flink_replay.operators.replay import collected_files
from airflow_flink_replay.run_io import run_storage


def approved_asset(spec: ReplaySpec) -> Asset:
    """The Asset the gate emits on PASS: ``flink-agents-replay://<spec name>/approved``."""
    return Asset(f"flink-agents-replay://{spec.name}/approved")


def run_params(spec: ReplaySpec) -> dict[str, Param]:
    """The Params form of the UI-triggered DAG (defaults from the spec)."""
    return {
        "candidate": Param(
            spec.candidate_ref() or "", type="string", title="Candidate agent",
            description='"module:attr" of the candidate job definition (or factory, as the spec gives it; empty: '
            "production's agent, an A/A run)",
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
    if not run.candidate_ref():
        run = run.with_candidate(None)
    # a local folder as a plain path, else any ObjectStoragePath URI: only Airflow touches it
    run_dir = run_storage.join(run.runs_uri.removeprefix("file://"), dag_id, tag)
    manifest = run_storage.join(run_dir, "manifest.json")
    variants = run.variant_names()  # the DAG's: aa_replays is a spec field, never a run's override
    results = {v: run.result_topics(tag, v) for v in variants}
    out: dict[str, Any] = {
        ids.XCOM_SPEC_KEY: run.model_dump(mode="json"),
        ids.XCOM_RUN_TAG_KEY: tag,
        ids.XCOM_RUN_DIR_KEY: run_dir,
        ids.XCOM_MANIFEST_URI_KEY: manifest if run_storage.is_uri(manifest) else f"file://{manifest}",
        ids.XCOM_QUIESCE_MODE_KEY: run.quiesce_mode,
        ids.XCOM_EXISTING_MANIFEST_KEY: run.existing_manifest or "",
        ids.XCOM_EXISTING_SAVEPOINT_KEY: run.existing_savepoint or "",
        ids.XCOM_MEMORY_SOURCE_KEY: run.memory_source(),
        ids.XCOM_WINDOW_RECORDS_KEY: run.window.records,
        ids.XCOM_WINDOW_SECONDS_KEY: run.window.minutes * 60 if run.window.minutes else None,
        ids.XCOM_KEEP_FORK_KEY: run.keep_fork,
        ids.XCOM_COMPARE_CONFIG_KEY: run.compare.model_dump(mode="json"),
        ids.XCOM_TOPICS_KEY: {v: run.action_state_topic(tag, v) for v in variants},
        ids.XCOM_TOPIC_LIST_KEY: [
            *(run.action_state_topic(tag, v) for v in variants),
            *(t for topics in results.values() for t in topics.names()),
        ],
        ids.XCOM_RESULT_TOPICS_KEY: {v: topics.model_dump() for v, topics in results.items()},
    }
    prod = run.production
    for variant in variants:
        output_dir = run_storage.join(run_dir, variant, "output-parts")
        output, audit = collected_files(output_dir, variant)
        out[ids.fork_key(variant)] = run.fork_namespace(tag, variant)
        out[ids.output_key(variant)] = str(output)
        out[ids.audit_key(variant)] = str(audit)
        out[ids.job_spec_key(variant)] = ReplayJobSpec(
            variant=variant,
            agent_job=run.agent_job_for(variant),
            agent_factory=run.agent_factory_for(variant),
            job_identifier=run.fork_namespace(tag, variant),
            action_state_topic=run.action_state_topic(tag, variant),
            results=results[variant],  # outputs and audit travel over Kafka: no shared folder
            output_dir=output_dir,
            audit_dir=run_storage.join(run_dir, variant, "audit-parts"),
            kafka_bootstrap=run.kafka_bootstrap,
            kafka_security=run.kafka_security,
            manifest=manifest,
            manifest_key_ref=run.manifest_key_ref,  # a reference, resolved inside Flink; never the key
            production_action_state_topic=prod.action_state_topic,
            production_job_identifier=prod.job_identifier,
            policy=run.policy.resolved(own_cluster=run.replay_flink_conn_id not in (None, run.flink_conn_id)),
            agent_uid=prod.agent_uid,
            max_parallelism=prod.max_parallelism,
            action_state_partitions=prod.action_state_partitions,
            mem0_config=run.mem0_config,
            key_field=prod.key_field,
            connector_jars=run.connector_jars,
        ).model_dump(mode="json")
    return out


def resolve_task(spec: ReplaySpec, dag_id: str) -> Any:
    """The first task: the spec with the run's Params form and ``conf`` applied (:func:`resolve_run`).

    Returns its XComArg: ``run[key]`` pulls one key of the resolved run when the consuming task runs.
    """

    @task(task_id=ids.TASK_RESOLVE, multiple_outputs=True, retries=2)  # pure: the spec and the run's conf
    def resolve() -> dict[str, Any]:
        ctx = get_current_context()
        overrides = {**(ctx["params"] or {}), **((ctx["dag_run"].conf or {}) if ctx.get("dag_run") else {})}
        return resolve_run(spec, overrides, dag_id, run_tag(ctx))

    return resolve()

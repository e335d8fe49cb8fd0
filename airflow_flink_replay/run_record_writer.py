"""Write a replay run's :class:`RunRecord` from the DAG run's XComs (the DAG's last task, ``all_done``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.replay_spec import VARIANTS
from airflow_flink_replay.core.run_record import RunRecord, VariantRecord, file_digest


def write_run_record(context: Any, spec_name: str, replay_task_ids: list[str]) -> dict[str, Any]:
    """Gather what every task returned, chain it with digests, write ``run_record.json``; return a summary."""
    ti = context["ti"]

    def pull(task_id: str, key: str = "return_value") -> Any:
        try:
            return ti.xcom_pull(task_ids=task_id, key=key)
        except Exception:
            return None

    run_dir = Path(pull("resolve", "run_dir"))
    manifest_uri = pull("resolve", "manifest_uri")
    manifest_path = manifest_uri.removeprefix("file://") if manifest_uri else None
    resumed = pull("resume_production") or {}
    compare = pull("compare") or pull("compare", "comparison") or {}
    variants = []
    for variant, task_id in zip(VARIANTS, replay_task_ids, strict=True):
        result = pull(task_id) or {}
        variants.append(
            VariantRecord(
                variant=variant,
                agent_factory=(pull("resolve", f"job_spec_{variant}") or {}).get("agent_factory", "?"),
                job_id=result.get("job_id") or pull(task_id, "flink_job_id"),
                state=result.get("state"),
                fork_namespace=pull("resolve", f"fork_{variant}"),
                action_state_topic=(pull("resolve", "topics") or {}).get(variant),
                output=result.get("output"),
                output_digest=result.get("output_digest"),
                output_records=result.get("output_records"),
                audit=result.get("audit"),
                audit_digest=result.get("audit_digest"),
                duration_s=result.get("duration_s"),
            )
        )
    states: dict[str, str | None] = {}
    try:
        found = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
        states = {k: v for k, v in (found.get(ti.run_id) or {}).items()}
    except Exception as err:  # the record still chains the artefacts, but the run must not pass unseen
        states = {"(task states)": f"failed: could not read them ({type(err).__name__}: {err})"}
    report_dir = None
    if compare.get("report_uri"):
        report_dir = str(Path(str(compare["report_uri"]).removeprefix("file://")).parent)
    record = RunRecord(
        spec_name=spec_name,
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        created_at=datetime.now(UTC),
        manifest=manifest_uri,
        manifest_digest=file_digest(manifest_path) if manifest_path else None,
        savepoint=pull("quiesce") or pull("reuse_manifest"),
        production_resumed=resumed or None,
        downtime_s=resumed.get("downtime_seconds") if isinstance(resumed, dict) else None,
        memory_forks=[pull(f"fork_memory_{v}") or {} for v in VARIANTS],
        production_memory_check=pull("verify_production_memory"),
        action_state={"isolation": pull("isolate_action_state"), "cleanup": pull("delete_replay_topics")},
        variants=variants,
        report_dir=report_dir,
        report_digests={
            name: file_digest(str(compare[f"{name}_uri"]).removeprefix("file://"))
            for name in ("report", "summary", "junit")
            if compare.get(f"{name}_uri")
        },
        verdict=compare.get("verdict"),
        reasons=list(compare.get("reasons") or []),
        task_states=states,
        cleanup={
            "cancelled_jobs": pull("cancel_leftover_replays"),
            "forks_dropped": {v: pull(f"drop_fork_{v}") for v in VARIANTS},
        },
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "run_record.json"
    path.write_text(record.model_dump_json(indent=2))
    summary = {"run_record": str(path), "digest": record.digest(), "verdict": record.verdict,
               "downtime_s": record.downtime_s, "failed_tasks": failed_tasks(states, ti.task_id)}
    return summary


def failed_tasks(record_states: dict[str, str | None], own_task_id: str) -> list[str]:
    """Tasks of the run that failed (or could not run because something upstream failed)."""
    return sorted(
        t for t, st in record_states.items()
        if t != own_task_id and (st in ("failed", "upstream_failed") or str(st).startswith("failed: "))
    )

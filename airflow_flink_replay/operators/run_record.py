"""Step 9's last task: write the replay run's :class:`RunRecord` from the DAG run's XComs, then fail the run
if any step failed (cleanup tasks that succeed would otherwise let it pass).

Here, beside the other operators, because it is one: it reads the replay DAG's task ids
(:mod:`airflow_flink_replay.ids`) and runs as that DAG's last task (``all_done``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay import ids
from airflow_flink_replay.core.replay_spec import variant_names
from airflow_flink_replay.core.run_record import RunRecord, VariantRecord
from airflow_flink_replay.run_io import run_storage


class RunRecordOperator(BaseOperator):
    """Write ``run_record.json`` (every task's result chained with digests) into the run's directory.

    Pushes the summary (``run_record``, ``digest``, ``verdict``, ``downtime_s``, ``failed_tasks``) as
    return value and under one XCom key each, then fails when a task of the run failed.

    :param spec_name: the replay spec's name, recorded in the run record.
    :param variants: the run's replay variants in the DAG's order (the DAG passes
        ``ReplaySpec.variant_names()``); the record has a fork, a variant entry and a drop result for each. None:
        those of the resolved spec's ``aa_replays`` (the ``resolve`` task's XCom ``spec``).
    """

    template_fields = ("spec_name",)
    ui_color = "#f1f3f4"

    def __init__(self, *, spec_name: str, variants: Sequence[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        self.spec_name = spec_name
        self.variants = list(variants) if variants is not None else None

    def execute(self, context: Any) -> dict[str, Any]:
        """Write the record; fail the run if any step failed."""
        summary = write_run_record(context, self.spec_name, self.variants)
        if summary["failed_tasks"]:
            for key, value in summary.items():  # the task fails: its return value is not pushed
                context["ti"].xcom_push(key=key, value=value)
            raise AirflowFailException(
                f"replay run failed at {', '.join(summary['failed_tasks'])} (verdict: {summary['verdict']}); "
                f"run record: {summary['run_record']}"
            )
        return summary


def write_run_record(context: Any, spec_name: str, variants: Sequence[str] | None = None) -> dict[str, Any]:
    """Gather what every task returned, chain it with digests, write ``run_record.json``; return a summary.
    ``variants``: the run's (None: the resolved spec's, see :class:`RunRecordOperator`)."""
    ti = context["ti"]

    def pull(task_id: str, key: str = "return_value") -> Any:
        try:
            return ti.xcom_pull(task_ids=task_id, key=key)
        except Exception:
            return None

    def resolved(key: str) -> Any:
        return pull(ids.TASK_RESOLVE, key)

    run_dir = str(resolved(ids.XCOM_RUN_DIR_KEY))
    if variants is None:
        variants = variant_names((resolved(ids.XCOM_SPEC_KEY) or {}).get("aa_replays", 1))
    manifest_uri = resolved(ids.XCOM_MANIFEST_URI_KEY)
    resumed = pull(ids.TASK_RESUME_PRODUCTION) or {}
    compare = pull(ids.TASK_COMPARE) or pull(ids.TASK_COMPARE, ids.XCOM_COMPARISON_KEY) or {}
    states = _task_states(ti)
    checked = pull(ids.TASK_AGENT_CHECK) or pull(ids.TASK_AGENT_CHECK, ids.XCOM_AGENT_CHECK_KEY)
    record = RunRecord(
        spec_name=spec_name,
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        created_at=datetime.now(UTC),
        manifest=manifest_uri,
        manifest_digest=run_storage.digest(manifest_uri) if manifest_uri else None,
        agent_check=checked,
        refusal=refusal_of(checked),
        savepoint=pull(ids.TASK_QUIESCE) or pull(ids.TASK_REUSE_MANIFEST),
        production_resumed=resumed or None,
        lease=next((v for t in ids.LEASE_TASKS if (v := pull(t, ids.XCOM_LEASE_KEY))), None),
        downtime_s=resumed.get("downtime_seconds") if isinstance(resumed, dict) else None,
        memory_forks=[pull(ids.fork_task(v)) or {} for v in variants],
        production_memory_check=pull(ids.TASK_VERIFY_PRODUCTION_MEMORY),
        action_state={
            "isolation": pull(ids.TASK_ISOLATE_ACTION_STATE),
            "cleanup": pull(ids.TASK_DELETE_REPLAY_TOPICS),
        },
        variants=[_variant(v, pull) for v in variants],
        report_dir=run_storage.parent(str(compare["report_uri"])).removeprefix("file://")
        if compare.get("report_uri")
        else None,
        report_digests={
            name: run_storage.digest(str(compare[f"{name}_uri"]))
            for name in ("report", "summary", "junit")
            if compare.get(f"{name}_uri")
        },
        verdict=compare.get("verdict"),
        reasons=list(compare.get("reasons") or []),
        fidelity=compare.get("fidelity"),
        fidelity_self=compare.get("fidelity_self"),
        noise=dict(compare.get("noise") or {}),
        task_states=states,
        cleanup={
            "cancelled_jobs": pull(ids.TASK_CANCEL_LEFTOVER_REPLAYS),
            "forks_dropped": _forks_dropped(pull(ids.TASK_DROP_FORKS), pull(ids.TASK_DROP_FORKS, "dropped"), variants),
        },
    )
    path = run_storage.join(run_dir, "run_record.json")
    run_storage.write_text(path, record.model_dump_json(indent=2))
    return {
        "run_record": path,
        "digest": record.digest(),
        "verdict": record.verdict,
        "downtime_s": record.downtime_s,
        "failed_tasks": failed_tasks(states, ti.task_id),
    }


def refusal_of(checked: Any) -> str | None:
    """The agent check's problems when it refused the run (its XCom result), else None."""
    if not isinstance(checked, dict) or not checked.get("refused"):
        return None
    problems = (checked.get("checked") or {}).get("problems") or []
    return "agent check refused: " + ("; ".join(str(p) for p in problems) or str(checked.get("report", "")))


def _agent_ref(job_spec: dict[str, Any]) -> str:
    """The agent a variant ran as its spec names it: the job definition, else the factory."""
    return str(job_spec.get("agent_job") or job_spec.get("agent_factory") or "?")


def _variant(variant: str, pull: Any) -> VariantRecord:
    task_id = ids.replay_task(variant)
    result = pull(task_id) or {}
    submitted = (pull(ids.TASK_SUBMIT_REPLAYS) or {}).get(variant) or {}
    return VariantRecord(
        variant=variant,
        agent_factory=_agent_ref(pull(ids.TASK_RESOLVE, ids.job_spec_key(variant)) or {}),
        # the wait failed (or never started): the job its submission pushed
        job_id=result.get("job_id") or pull(task_id, ids.XCOM_FLINK_JOB_ID_KEY)
        or submitted.get("job_id"),
        state=result.get("state"),
        fork_namespace=pull(ids.TASK_RESOLVE, ids.fork_key(variant)),
        action_state_topic=(pull(ids.TASK_RESOLVE, ids.XCOM_TOPICS_KEY) or {}).get(variant),
        output=result.get("output"),
        output_digest=result.get("output_digest"),
        output_records=result.get("output_records"),
        audit=result.get("audit"),
        audit_digest=result.get("audit_digest"),
        unmediated_calls=result.get("unmediated_calls"),
        cassette_calls=result.get("cassette_calls"),
        results=result.get("results"),
        duration_s=result.get("duration_s"),
        capacity_wait_s=submitted.get("capacity_wait_s"),
        submit_lock_wait_s=submitted.get("submit_lock_wait_s"),
    )


def _task_states(ti: Any) -> dict[str, str | None]:
    try:
        found = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
        return dict(found.get(ti.run_id) or {})
    except Exception as err:  # the record still chains the artefacts, but the run must not pass unseen
        return {"(task states)": f"failed: could not read them ({type(err).__name__}: {err})"}


def failed_tasks(record_states: dict[str, str | None], own_task_id: str) -> list[str]:
    """Tasks of the run that failed (or could not run because something upstream failed)."""
    return sorted(
        t
        for t, st in record_states.items()
        if t != own_task_id and (st in ("failed", "upstream_failed") or str(st).startswith("failed: "))
    )


def _forks_dropped(result: Any, partial: Any, variants: Sequence[str]) -> dict[str, Any]:
    """The drop result by variant: the task's return value, or what it dropped before it failed."""
    found = result if isinstance(result, dict) else partial if isinstance(partial, dict) else {}
    return {variant: found.get(variant) for variant in variants}

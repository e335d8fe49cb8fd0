"""Task ids and XCom keys of the replay DAG: one name per task, used by the builders, the run record and tests.

Users and dashboards rely on these ids (task states, ``xcom_pull(task_ids=...)``): changing one is a
breaking change. XCom keys an operator pushes are defined next to that operator and re-exported here.
"""

from __future__ import annotations

from airflow_flink_replay.operators.agent_check import XCOM_AGENT_CHECK_KEY, XCOM_CHANGED_RESOURCES_KEY
from airflow_flink_replay.operators.compare import XCOM_COMPARISON_KEY
from airflow_flink_replay.operators.preflight import XCOM_JOB_ID_KEY, XCOM_PRODUCTION_DETAILS_KEY
from airflow_flink_replay.operators.production_lease import XCOM_LEASE_KEY

__all__ = [
    "XCOM_AGENT_CHECK_KEY",
    "XCOM_CHANGED_RESOURCES_KEY",
    "XCOM_COMPARISON_KEY",
    "XCOM_JOB_ID_KEY",
    "XCOM_LEASE_KEY",
    "XCOM_PRODUCTION_DETAILS_KEY",
]

# --- stage: capture (preflight, savepoint or reuse, resume, window, manifest)
TASK_RESOLVE = "resolve"
TASK_PREFLIGHT = "preflight"
TASK_AGENT_CHECK = "agent_check"
TASK_CHOOSE_START = "choose_start"
TASK_OFFSETS_BEFORE_QUIESCE = "offsets_before_quiesce"
TASK_QUIESCE = "quiesce"
TASK_START_OFFSETS = "start_offsets"
TASK_REUSE_MANIFEST = "reuse_manifest"
TASK_RESUME_PRODUCTION = "resume_production"
TASK_CAPTURE_WINDOW = "capture_window"
TASK_MANIFEST = "manifest"
# --- stage: replay
TASK_ISOLATE_ACTION_STATE = "isolate_action_state"
TASK_REPLAY_FROM = "replay_from"
#: Stage replay: one task checks every variant against production's plan and submits its replay job (one
#: job-side run).
TASK_SUBMIT_REPLAYS = "submit_replays"
# --- stage: compare
TASK_COMPARE = "compare"
TASK_APPROVE = "approve"
# --- stage: cleanup
TASK_VERIFY_PRODUCTION_MEMORY = "verify_production_memory"
TASK_CANCEL_LEFTOVER_REPLAYS = "cancel_leftover_replays"
#: Stage cleanup: one task drops every variant's memory fork.
TASK_DROP_FORKS = "drop_forks"
TASK_DELETE_REPLAY_TOPICS = "delete_replay_topics"
TASK_ASSERT_PRODUCTION = "assert_production"
TASK_RUN_RECORD = "run_record"
#: The tasks that hold production's lease, the last first: each pushes it as it left it (``XCOM_LEASE_KEY``).
LEASE_TASKS = (TASK_ASSERT_PRODUCTION, TASK_RESUME_PRODUCTION, TASK_QUIESCE)


#: stage memory: pre-copies the baseline's source while production runs (its fork then copies the delta)
TASK_PRECOPY_MEMORY = "precopy_memory_baseline"


# --- per variant: the spec's variants (``ReplaySpec.variant_names()``: baseline, baseline_2 [, baseline_3 ...],
# candidate) each get a fork task and a replay task
def fork_task(variant: str) -> str:
    """Stage memory: the task that forks ``variant``'s Mem0 namespace."""
    return f"fork_memory_{variant}"


def replay_task(variant: str) -> str:
    """Stage replay: the task that waits for ``variant``'s replay job and collects its outputs."""
    return f"replay_{variant}"


# --- XCom keys of the resolve task (``multiple_outputs``: one key per value of the resolved run)
XCOM_SPEC_KEY = "spec"
XCOM_RUN_TAG_KEY = "run_tag"
XCOM_RUN_DIR_KEY = "run_dir"
XCOM_MANIFEST_URI_KEY = "manifest_uri"
XCOM_QUIESCE_MODE_KEY = "quiesce_mode"
XCOM_EXISTING_MANIFEST_KEY = "existing_manifest"
XCOM_EXISTING_SAVEPOINT_KEY = "existing_savepoint"
XCOM_MEMORY_SOURCE_KEY = "memory_source"
XCOM_WINDOW_RECORDS_KEY = "window_records"
XCOM_WINDOW_SECONDS_KEY = "window_seconds"
XCOM_KEEP_FORK_KEY = "keep_fork"
XCOM_COMPARE_CONFIG_KEY = "compare_config"
XCOM_TOPICS_KEY = "topics"
XCOM_TOPIC_LIST_KEY = "topic_list"
XCOM_RESULT_TOPICS_KEY = "result_topics"


def fork_key(variant: str) -> str:
    """Resolve's key: ``variant``'s fork namespace."""
    return f"fork_{variant}"


def output_key(variant: str) -> str:
    """Resolve's key: where ``variant``'s outputs are collected."""
    return f"output_{variant}"


def audit_key(variant: str) -> str:
    """Resolve's key: where ``variant``'s audit is collected."""
    return f"audit_{variant}"


def job_spec_key(variant: str) -> str:
    """Resolve's key: ``variant``'s :class:`ReplayJobSpec`."""
    return f"job_spec_{variant}"


# --- XCom keys of replay_from (``multiple_outputs``)
XCOM_SAVEPOINT_PATH_KEY = "savepoint_path"
XCOM_PRODUCTION_PLAN_KEY = "production_plan"
#: pushed by each submit and replay task as soon as its Flink job is known (the run record reads it when the
#: task failed)
XCOM_FLINK_JOB_ID_KEY = "flink_job_id"

"""Task ids and XCom keys of the replay DAG and of the operators it is built from: one name per task and per key,
used by the operators that push and read them, the stage builders, the run record and tests.

A leaf: it imports nothing, so ``operators/`` and ``replay_dag/`` both import it and neither imports the other
for a name (``tests/unit/test_layering.py``). Users and dashboards rely on these ids and keys (task states,
``xcom_pull(task_ids=..., key=...)``): changing one is a breaking change.
"""

from __future__ import annotations

# --- XCom keys the operators push (beside ``return_value``)
#: Preflight: production's Flink job id (``None`` when preflight did not run: ``multiple_outputs``).
XCOM_JOB_ID_KEY = "job_id"
#: Preflight: production's job details JSON (``GET /jobs/{id}``), the replays' identity preflight input.
XCOM_PRODUCTION_DETAILS_KEY = "production_details"
#: Agent check: its result when the task fails (a failed task pushes no return value).
XCOM_AGENT_CHECK_KEY = "agent_check"
#: Agent check: the candidate's changed resources, ``{name: "changed" | "added"}`` (also the result's
#: ``changed``): the submit task keeps them off production's cassette in the candidate's replay, the comparison
#: lists them.
XCOM_CHANGED_RESOURCES_KEY = "changed_resources"
#: The tasks that hold production's lease: the lease as the pushing task left it
#: (:func:`~airflow_flink_replay.core.production_lease.lease_summary`).
XCOM_LEASE_KEY = "lease"
#: Submission: the :class:`~airflow_flink_replay.core.window_coverage.WindowCoverage`, how far production had
#: processed the window when the replays were given its cassette (the comparison reads it).
XCOM_CASSETTE_COVERAGE_KEY = "cassette_coverage"
#: Submission and replay tasks: the Flink job, pushed as soon as it is known (the run record reads it when the
#: task failed).
XCOM_FLINK_JOB_ID_KEY = "flink_job_id"
#: Comparison: the summary, pushed before a gate FAIL fails the task (the run record reads it).
XCOM_COMPARISON_KEY = "comparison"

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

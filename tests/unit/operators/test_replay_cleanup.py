"""CancelLeftoverReplaysOperator cancels exactly this run's replay jobs that have not ended."""

from __future__ import annotations

from airflow_flink_replay.core.replay_job_spec import replay_job_name_prefix
from airflow_flink_replay.operators.replay_cleanup import CancelLeftoverReplaysOperator
from tests.unit.operators.stubs import StubFlinkHook, context, job


def test_cancels_only_this_runs_replays_that_still_run() -> None:
    ctx = context("cancel_leftover_replays")
    mine = replay_job_name_prefix("dag", ctx["ti"].run_id)
    other_run = replay_job_name_prefix("dag", "manual__other")
    hook = StubFlinkHook([
        job("1" * 32, mine + "baseline", "RUNNING"),
        job("2" * 32, mine + "baseline_2", "FINISHED"),
        job("3" * 32, mine + "candidate", "RESTARTING"),
        job("4" * 32, other_run + "candidate", "RUNNING"),
        job("5" * 32, "production", "RUNNING"),
    ])
    op = CancelLeftoverReplaysOperator(task_id="cancel_leftover_replays", flink_conn_id="flink_replays")
    op.__dict__["hook"] = hook
    assert op.trigger_rule == "all_done"
    assert op.execute(ctx) == ["1" * 32, "3" * 32]
    assert [c for c in hook.calls if c[0] == "cancel_job"] == [("cancel_job", "1" * 32), ("cancel_job", "3" * 32)]


def test_a_run_whose_id_extends_this_one_is_left_alone() -> None:
    """Issue 42 §11: names were matched by prefix, so run ``r1`` also cancelled the replays of run ``r1-x``."""
    from airflow_flink_replay.core.replay_job_spec import replay_job_name

    ctx = context("cancel_leftover_replays")
    run_id = ctx["ti"].run_id
    hook = StubFlinkHook([
        job("1" * 32, replay_job_name("dag", run_id, "candidate"), "RUNNING"),
        job("2" * 32, replay_job_name("dag", run_id + "-x", "candidate"), "RUNNING"),
        job("3" * 32, replay_job_name("dag", run_id + "-baseline", "candidate"), "RUNNING"),
        job("4" * 32, replay_job_name("dag", run_id, "baseline") + "-copy", "RUNNING"),
    ])
    op = CancelLeftoverReplaysOperator(task_id="cancel_leftover_replays", flink_conn_id="flink_replays")
    op.__dict__["hook"] = hook
    assert op.execute(ctx) == ["1" * 32]

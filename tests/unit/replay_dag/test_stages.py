"""The replay DAG's graph, built by the stage builders, is the one users and tests rely on: every task id,
every task's direct upstream tasks, trigger rule and retries (task ids are spelled out here on purpose: renaming a
constant in ``airflow_flink_replay.ids`` is a breaking change this test reports). A spec with more A/A replays
(``aa_replays``) adds each extra baseline's fork and replay exactly where baseline_2's are, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay import ids
from airflow_flink_replay.core.replay_spec import ReplaySpec
from tests.unit.core.test_replay_spec import _spec

REPLAYS = ["replay_baseline", "replay_baseline_2", "replay_candidate"]
FORKS = ["fork_memory_baseline", "fork_memory_baseline_2", "fork_memory_candidate"]
#: task id -> (direct upstream task ids, trigger rule) of the gate DAG (the others lack ``approve``)
GATE_GRAPH: dict[str, tuple[list[str], str]] = {
    "resolve": ([], "all_success"),
    "preflight": (["resolve"], "all_success"),
    "agent_check": (["preflight", "resolve"], "all_success"),
    "precopy_memory_baseline": (["agent_check", "resolve"], "all_success"),
    "choose_start": (["agent_check", "precopy_memory_baseline", "resolve"], "all_success"),
    "offsets_before_quiesce": (["choose_start"], "all_success"),
    "quiesce": (["offsets_before_quiesce", "preflight", "resolve"], "all_success"),
    "start_offsets": (["offsets_before_quiesce", "quiesce"], "all_success"),
    "reuse_manifest": (["choose_start", "resolve"], "all_success"),
    "fork_memory_baseline": (["quiesce", "resolve", "reuse_manifest", "start_offsets"], "none_failed_min_one_success"),
    "fork_memory_baseline_2": (["fork_memory_baseline", "resolve", "reuse_manifest"], "none_failed_min_one_success"),
    "fork_memory_candidate": (["fork_memory_baseline", "resolve", "reuse_manifest"], "none_failed_min_one_success"),
    # preflight: the job id arrives as an XComArg (already upstream through quiesce; all_done either way)
    "resume_production": (["fork_memory_baseline", "preflight", "quiesce", "resolve"], "all_done"),
    "capture_window": ([*FORKS, "resolve", "resume_production", "start_offsets"], "all_success"),
    "manifest": (["capture_window", "quiesce", "resolve", "start_offsets"], "all_success"),
    "isolate_action_state": ([*FORKS, "manifest", "resolve", "reuse_manifest"], "none_failed_min_one_success"),
    "replay_from": (["isolate_action_state"], "all_success"),
    # every variant is checked against production's plan and submitted (one job-side run) before any is
    # waited for; agent_check: the candidate's changed resources arrive as an XComArg (kept off the cassette)
    "submit_replays": (["agent_check", "replay_from", "resolve"], "all_success"),
    **{r: (["resolve", "submit_replays"], "all_success") for r in REPLAYS},
    "compare": (["agent_check", *REPLAYS, "resolve"], "all_success"),  # agent_check: the changed resources
    "approve": (["compare"], "all_success"),
    "verify_production_memory": ([*REPLAYS, "resolve"], "all_done"),
    "cancel_leftover_replays": (["compare", *REPLAYS, "verify_production_memory"], "all_done"),
    "delete_replay_topics": (["cancel_leftover_replays", "isolate_action_state", "resolve"], "all_done"),
    # one task drops every variant's fork (their namespaces: XComArgs of resolve)
    "drop_forks": (["delete_replay_topics", "resolve"], "all_done"),
    # the production check: after every cleanup task, before the record (quiesce + preflight: XComArgs)
    "assert_production": (["drop_forks", "preflight", "quiesce", "resolve"], "all_done"),
    "run_record": (["assert_production"], "all_done"),
}
#: task id -> (retries, retry delay in seconds, exponential backoff multiplier): retried only where a retry
#: cannot duplicate work (no second replay job, no second production job, no longer downtime)
RETRIES: dict[str, tuple[int, float, float]] = {
    "resolve": (2, 10, 0),
    "preflight": (2, 10, 0),
    "agent_check": (1, 10, 0),
    "precopy_memory_baseline": (1, 10, 0),
    "choose_start": (1, 10, 0),
    "offsets_before_quiesce": (2, 10, 0),
    "quiesce": (1, 5, 0),
    "start_offsets": (2, 10, 0),
    "reuse_manifest": (2, 10, 0),
    "fork_memory_baseline": (1, 10, 0),
    "fork_memory_baseline_2": (1, 10, 0),
    "fork_memory_candidate": (1, 10, 0),
    "resume_production": (4, 5, 2.0),
    "capture_window": (2, 10, 0),
    "manifest": (2, 10, 0),
    "isolate_action_state": (2, 10, 0),
    "replay_from": (2, 10, 0),
    "submit_replays": (0, 10, 0),
    **{r: (1, 5, 0) for r in REPLAYS},
    "compare": (0, 10, 0),
    "approve": (0, 10, 0),
    "verify_production_memory": (2, 10, 0),
    "cancel_leftover_replays": (3, 10, 2.0),
    "delete_replay_topics": (2, 10, 0),
    "drop_forks": (2, 10, 0),
    "assert_production": (2, 5, 0),
    "run_record": (0, 10, 0),
}


@pytest.mark.parametrize("kind", ["gate", "manual", "nightly"])
def test_every_task_id_upstream_set_and_trigger_rule(tmp_path: Path, kind: str) -> None:
    from airflow_flink_replay.dag_factory import build_replay_dag

    dag = build_replay_dag(ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}")), dag_id=kind, kind=kind)
    expected = {t: v for t, v in GATE_GRAPH.items() if kind == "gate" or t != "approve"}
    graph = {t.task_id: (sorted(t.upstream_task_ids), str(t.trigger_rule.value)) for t in dag.tasks}
    assert graph == {t: (sorted(up), rule) for t, (up, rule) in expected.items()}
    retries = {t.task_id: (t.retries, t.retry_delay.total_seconds(), t.retry_exponential_backoff) for t in dag.tasks}
    assert retries == {t: v for t, v in RETRIES.items() if t in expected}


def test_a_dag_wide_retry_default_never_reaches_a_task_that_could_duplicate(tmp_path: Path) -> None:
    from airflow_flink_replay.dag_factory import build_replay_dag

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    dag = build_replay_dag(spec, dag_id="gate", kind="gate", default_args={"retries": 5})
    assert {t.task_id: t.retries for t in dag.tasks} == {t: v[0] for t, v in RETRIES.items()}


def test_constants_name_the_dags_tasks() -> None:
    named = {v for k, v in vars(ids).items() if k.startswith("TASK_")}
    per_variant = (ids.fork_task, ids.replay_task)
    named |= {f(v) for f in per_variant for v in ReplaySpec.model_validate(_spec()).variant_names()}
    assert named == set(GATE_GRAPH)


def _with_baseline_3(graph: dict[str, tuple[list[str], str]]) -> dict[str, tuple[list[str], str]]:
    """``graph`` with baseline_3's fork and replay wherever baseline_2's are (upstream of the same tasks, after
    the same ones)."""
    extra = {"fork_memory_baseline_2": "fork_memory_baseline_3", "replay_baseline_2": "replay_baseline_3"}
    out = {t: ([*up, *(extra[u] for u in up if u in extra)], rule) for t, (up, rule) in graph.items()}
    out.update({new: graph[old] for old, new in extra.items()})
    return out


@pytest.mark.parametrize("kind", ["gate", "nightly"])
def test_an_extra_a_a_replay_adds_its_fork_and_replay_beside_baseline_2s(tmp_path: Path, kind: str) -> None:
    """aa_replays=2: fork_memory_baseline_3 copies the baseline's fork as baseline_2's does, replay_baseline_3 waits
    for its job, and every task that takes each variant (isolate, submit, compare, cancel, drop, the record) takes
    baseline_3 too; the compare task gets its outputs and audit after baseline_2's."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    from airflow_flink_replay.dag_factory import build_replay_dag

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", aa_replays=2))
    dag = build_replay_dag(spec, dag_id=kind, kind=kind)
    expected = {t: v for t, v in _with_baseline_3(GATE_GRAPH).items() if kind == "gate" or t != "approve"}
    graph = {t.task_id: (sorted(t.upstream_task_ids), str(t.trigger_rule.value)) for t in dag.tasks}
    assert graph == {t: (sorted(up), rule) for t, (up, rule) in expected.items()}
    retries = {t.task_id: (t.retries, t.retry_delay.total_seconds(), t.retry_exponential_backoff) for t in dag.tasks}
    assert retries["fork_memory_baseline_3"] == RETRIES["fork_memory_baseline_2"]
    assert retries["replay_baseline_3"] == RETRIES["replay_baseline_2"]

    def keys(value: object) -> list[str]:
        args = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        assert all(isinstance(a, XComArg) and a.operator.task_id == "resolve" for a in args), value
        return [a.key for a in args]  # type: ignore[union-attr]

    tasks = dag.task_dict
    variants = ["baseline", "baseline_2", "baseline_3", "candidate"]
    fork = tasks["fork_memory_baseline_3"]
    assert (keys(fork.source), keys(fork.target)) == (["fork_baseline"], ["fork_baseline_3"])
    assert keys(tasks["replay_baseline_3"].spec) == ["job_spec_baseline_3"]
    assert keys(tasks["submit_replays"].specs) == [f"job_spec_{v}" for v in variants]
    assert tasks["isolate_action_state"].variants == variants
    runs = tasks["compare"].runs
    assert (keys(runs.baseline_2), keys(runs.extra_baselines)) == (["output_baseline_2"], ["output_baseline_3"])
    assert keys(runs.extra_baseline_audits) == ["audit_baseline_3"]
    assert keys(tasks["drop_forks"].namespaces) == [f"fork_{v}" for v in variants]
    assert tasks["cancel_leftover_replays"].variants == tasks["run_record"].variants == variants


def test_one_a_a_replay_passes_the_compare_task_no_extra_baselines(tmp_path: Path) -> None:
    from airflow_flink_replay.dag_factory import build_replay_dag

    dag = build_replay_dag(ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}")), dag_id="g", kind="gate")
    compare = dag.task_dict["compare"]
    assert (compare.runs.extra_baselines, compare.runs.extra_baseline_audits) == ([], [])
    assert dag.task_dict["run_record"].variants == ["baseline", "baseline_2", "candidate"]


def test_every_task_that_reads_or_rewrites_the_manifest_gets_the_signing_connection(tmp_path: Path) -> None:
    """Issue 42 §4, §11: the comparison and the step that records the isolation check the signature too."""
    from airflow_flink_replay.dag_factory import build_replay_dag

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", manifest_signing_conn_id="afr_signing"))
    dag = build_replay_dag(spec, dag_id="gate", kind="gate")
    signed = {t.task_id for t in dag.tasks if getattr(t, "signing_conn_id", None) == "afr_signing"}
    assert {ids.TASK_MANIFEST, ids.TASK_REUSE_MANIFEST, ids.TASK_ISOLATE_ACTION_STATE, ids.TASK_COMPARE} <= signed


def test_the_tasks_that_touch_production_share_its_lease(tmp_path: Path) -> None:
    """Issue 42 §10: the quiesce takes production's lease (waiting the spec's lease_wait_minutes), the resume and
    the final check hold and release the same one, below runs_uri."""
    from airflow_flink_replay.dag_factory import build_replay_dag

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}/runs", lease_wait_minutes=0.5))
    for kind in ("gate", "manual"):
        tasks = {t.task_id: t for t in build_replay_dag(spec, dag_id=kind, kind=kind).tasks}
        leased = {t for t, op in tasks.items() if getattr(op, "lease", None)}
        assert leased == {ids.TASK_QUIESCE, ids.TASK_RESUME_PRODUCTION, ids.TASK_ASSERT_PRODUCTION}
        assert {tasks[t].lease.folder for t in leased} == {f"{tmp_path}/runs/_leases"}
        assert tasks[ids.TASK_QUIESCE].lease.wait == 30.0

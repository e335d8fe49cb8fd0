"""Production's stop window as one task (StopWindowOperator) on the real local stack, under dag.test().

Production is the review agent (Flink Agents, Mem0 memory on the stack's Chroma) fed five reviews a second
the whole time, so it writes memories from the pre-copy right up to the stop. Inside the window (production
stopped: after the savepoint, before the resubmission) the test's probe reads production's namespace
fingerprint and the capture topic's end offsets independently of the operator. Then, with production's memory
journal (the cut reads only the memories it names since the pre-copy) and without (the cut reads them all):

- the memory cut equals production's namespace at that instant (fingerprint and count), and it was a delta
  over the pre-copy: only what production wrote since was copied inside the window;
- the start offsets are the capture topic's end at the savepoint;
- production RUNS again restored from this run's savepoint, one job, and the DAG's resume task reports the
  window's downtime without submitting a second copy.

With the memory store unreachable at the cut (a connection to a port nothing listens on), production is
still resumed inside the window, the task fails with the store's error and for good (no retry: the
savepoint instant cannot be cut again once production runs), and no fork memory exists.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.hooks.mem0 import Mem0Hook
from tests.dag_testing import (
    connections_with_mem0_down,
    deploy_test_production,
    running_jobs,
    stack_flink_default,
    stop_production,
)
from tests.jobs import harness

pytestmark = pytest.mark.timeout(900)

PROBES: dict[str, dict[str, Any]] = {}
RESULTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def production(stack: Any, airflow_db: Any, tmp_path_factory: Any) -> Any:
    prod = deploy_test_production(stack, tmp_path_factory.mktemp("window"), "window")
    yield prod
    stop_production(stack, prod)


@pytest.fixture(autouse=True)
def flink_conn_env(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """flink_default as an env var too (Airflow caches the secrets backends of the first dag.test())."""
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", stack_flink_default(stack))


@pytest.fixture(scope="module")
def flink(stack: Any) -> FlinkRestHook:
    return FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, retries=2))


def _window_dag(dag_id: str, spec: ReplaySpec, job_id: str, fork: str, mem0_conn_id: str, mem0: dict[str, Any],
                journal: str | None = None) -> Any:  # fmt: skip
    """precopy → offsets before → the window (with the probe inside) → resume → record, as the replay DAG
    wires them (``journal``: production's memory journal topic, given to the pre-copy and the window)."""
    from airflow.sdk import DAG, task

    from airflow_flink_replay.operators.flink import QuiesceRef, ResumeJobOperator
    from airflow_flink_replay.operators.manifest import RecordStartOffsetsOperator
    from airflow_flink_replay.operators.mem0 import PrecopyMem0NamespaceOperator
    from airflow_flink_replay.operators.stop_window import StopWindowOperator

    class ProbedWindow(StopWindowOperator):
        """Reads production's memory and the capture topic's end while production is stopped."""

        def inside_window(self, context: Any, quiesce: Any) -> None:
            memory = Mem0Hook(config=mem0)
            kafka = KafkaOffsetsHook(kafka_config_id=spec.kafka_conn_id)
            try:
                offsets = kafka.end_offsets(spec.production.capture_topic)
            finally:
                kafka.close()
            at_cut = memory.fingerprint(spec.memory_source())
            PROBES[dag_id] = {"fingerprint": at_cut.digest, "count": at_cut.count,
                              "offsets": {str(p): o for p, o in offsets.items()}}

    prod = spec.production
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        precopy = PrecopyMem0NamespaceOperator(task_id="precopy", source=spec.memory_source(), target=fork,
                                               mem0_conn_id=mem0_conn_id, memory_journal_topic=journal,
                                               kafka_config_id=spec.kafka_conn_id)

        @task
        def production_keeps_writing() -> None:
            time.sleep(4)  # five reviews a second reach production's memory after the pre-copy

        before = RecordStartOffsetsOperator(task_id="offsets_before_quiesce", topic=prod.capture_topic,
                                            kafka_config_id=spec.kafka_conn_id)
        window = ProbedWindow(
            task_id="quiesce", job_id=job_id, mode="drain", target_directory=spec.savepoint_dir, timeout=120,
            capture_topic=prod.capture_topic, offsets_before=before.output, kafka_config_id=spec.kafka_conn_id,
            memory_source=spec.memory_source(), memory_target=fork, mem0_conn_id=mem0_conn_id,
            memory_journal_topic=journal, program=prod.program, job_name=prod.job_name, retries=1,
            retry_delay=timedelta(seconds=1),
        )
        resume = ResumeJobOperator(task_id="resume_production", program=prod.program,
                                   quiesce=QuiesceRef(result=window.output, mode="drain", production_job_id=job_id,
                                                      task_id="quiesce"),
                                   job_name=prod.job_name, timeout=180)

        @task(trigger_rule="all_done")
        def record(window_result: Any, resumed: Any) -> None:
            RESULTS[dag_id] = {"window": window_result, "resume": resumed}

        precopy >> production_keeps_writing() >> before >> window >> resume
        record(window.output, resume.output)
    return dag


def _current_job(flink: FlinkRestHook, name: str) -> str:
    jobs = [j.jid for j in flink.list_jobs().by_name(name, states=("RUNNING",))]
    assert len(jobs) == 1, jobs
    return jobs[0]


@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "full-read"])
def test_one_task_takes_the_cut_production_wrote_up_to_and_brings_production_back(
    stack: Any, production: Any, flink: FlinkRestHook, journaled: bool
) -> None:
    """With production's memory journal the cut reads only what the journal names since the pre-copy; without,
    the whole namespace: both equal production's memory at the stop, which production wrote right up to."""
    from airflow_flink_replay.core.flink_models import QuiesceResult
    from airflow_flink_replay.local.demo import ReviewFeeder

    spec = ReplaySpec.from_yaml(production["spec_path"])
    journal = spec.production.memory_journal_topic if journaled else None
    assert journal or not journaled
    dag_id = f"stop_window_cut_{'journal' if journaled else 'full'}"
    job_id = _current_job(flink, production["job_name"])
    fork = f"{production['identifier']}-window-fork-{int(journaled)}"
    dag = _window_dag(dag_id, spec, job_id, fork, spec.mem0_conn_id, stack.mem0_config(), journal)
    with ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=50_000 + 1000 * journaled,
                      rate=5):
        dagrun = harness.run_dag_test(dag, stack.connections_file)
    assert str(dagrun.state) == "success", RESULTS.get(dag_id)
    try:
        result = QuiesceResult.model_validate(RESULTS[dag_id]["window"])
        probe = PROBES[dag_id]
        window = result.window
        assert window is not None and window.error is None and window.resumed is not None

        # the cut is production's memory at the stop, and only production's writes since the pre-copy were copied
        cut = window.memory_cut or {}
        assert (cut["source_fingerprint"], cut["count"]) == (probe["fingerprint"], probe["count"]), (cut, probe)
        assert cut["delta"] and cut["added"] + cut["updated"] > 0, cut
        assert cut["journal"] is journaled, cut
        assert cut["added"] + cut["updated"] + cut["removed"] < cut["count"], cut  # not a full copy in the window
        # the start offsets are the capture topic's end at the savepoint
        assert window.start_offsets is not None
        assert {str(p): o for p, o in window.start_offsets["offsets"].items()} == probe["offsets"]

        # production runs again, once, restored from this run's savepoint; resume only confirmed it
        resumed = window.resumed
        assert running_jobs(stack, production["job_name"]) == [resumed.job_id]
        assert flink.restored_savepoint(resumed.job_id) == result.savepoint_path
        assert RESULTS[dag_id]["resume"] == resumed.model_dump(mode="json")
        assert resumed.downtime_seconds == pytest.approx(
            (resumed.running_at - result.requested_at).total_seconds(), abs=0.01)
        assert {"savepoint", "offsets", "memory_cut", "resubmit", "running"} <= set(window.steps_s)
        assert result.job_stopped_at is not None  # the old job's teardown ended meanwhile
    finally:
        Mem0Hook(config=stack.mem0_config()).drop({"user_id": fork})


def test_a_store_down_at_the_cut_still_resumes_production_and_leaves_no_fork(
    stack: Any, production: Any, flink: FlinkRestHook, tmp_path: Path
) -> None:
    spec = ReplaySpec.from_yaml(production["spec_path"])
    conn_file = connections_with_mem0_down(stack, "mem0_window_down", tmp_path)
    job_id = _current_job(flink, production["job_name"])
    fork = f"{production['identifier']}-window-down"

    dag = _window_dag("stop_window_store_down", spec, job_id, fork, "mem0_window_down", stack.mem0_config())
    harness.register_dag(dag)
    dagrun = dag.test(conn_file_path=conn_file)
    states = {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}
    assert states["quiesce"] == "failed" and states["resume_production"] == "success", states
    window_ti = next(ti for ti in dagrun.get_task_instances() if ti.task_id == "quiesce")
    assert window_ti.try_number == 1  # failed for good: a retry could not cut the savepoint instant again
    # production came back inside the window: restored from this run's savepoint, one job
    jobs = running_jobs(stack, production["job_name"])
    assert len(jobs) == 1 and jobs[0] != job_id
    restored = flink.restored_savepoint(jobs[0]) or ""
    assert "/stop_window_store_down/" in restored, restored
    assert RESULTS["stop_window_store_down"]["resume"]["job_id"] == jobs[0]
    assert Mem0Hook(config=stack.mem0_config()).count({"user_id": fork}) == 0

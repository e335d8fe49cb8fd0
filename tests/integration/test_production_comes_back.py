"""Production always comes back: faults injected on the real local stack, under dag.test().

Production here is the keyed counter with a gate: while the gate file exists, the record the operator
holds keeps every barrier behind it, so this run's stop-with-savepoint stays IN_PROGRESS until the test
opens the gate (resume does, once it has seen the stop in flight). Each run is ``quiesce →
resume_production (all_done) → assert_production (all_done)`` with the real operators; the faults:

- the quiesce task's worker is SIGKILLed once Flink reports its stop IN_PROGRESS (the operator runs in a
  child process, as a worker would);
- the stop takes longer than the quiesce timeout (the quiesce task fails while Flink is still stopping);
- Flink REST answers 503 to resume (a small proxy in front of production's REST port answers 503 to its
  first requests, then forwards): resume is retried with backoff and submits production once;
- the replay cluster's JobManager restarts during a replay (a whole replay DAG, replays on 8082).

After each: production RUNNING (restored from this run's savepoint), exactly one production job, no replay
job left, no replay topic or memory fork left. Events, not speed: every wait polls for a state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
from airflow_flink_replay.operators.flink import (
    QuiesceAndSavepointOperator,
    QuiesceRef,
    ResumeJobOperator,
    operation_trigger_id,
)
from airflow_flink_replay.operators.production_check import AssertProductionOperator
from tests.jobs import harness
from tests.rest_front import RestFront

pytestmark = pytest.mark.timeout(900)

RESULTS: dict[str, dict[str, Any]] = {}
LIVE = ("INITIALIZING", "CREATED", "RUNNING", "RESTARTING", "RECONCILING")


@pytest.fixture(autouse=True)
def flink_conn_env(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """flink_default as an env var (Airflow caches the secrets backends of the first dag.test())."""
    conns = json.loads(Path(stack.connections_file).read_text())
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", json.dumps(conns["flink_default"]))


@pytest.fixture(scope="module")
def flink(stack: Any) -> FlinkRestHook:
    return FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, retries=2))


@pytest.fixture(scope="module")
def production(
    stack: Any, flink: FlinkRestHook, airflow_db: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The gated keyed counter as production (gate open); ``job_id`` is looked up by each test."""
    name = harness.unique("pcb")
    gate = tmp_path_factory.mktemp("gate") / "closed"
    harness.create_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")
    program = harness.counter_program(
        stack.kafka_bootstrap, f"{name}-in", f"{name}-out", stack.connector_jars, job_name=name, hold=False,
        extra_args=["--gate", str(gate)],
    )  # fmt: skip
    job_id = RestPythonSubmitter(flink, flink_home=stack.flink_home).submit(program).job_id
    flink.wait_for_job_state(job_id, ("RUNNING",), timeout=180, all_tasks_running=True)
    prod = {"name": name, "program": program, "job_id": job_id, "fed": 0, "gate": gate}
    yield prod
    _open_gate(prod)
    for job in flink.list_jobs().by_name(name):
        if job.state in LIVE:
            flink.cancel_job(job.jid)
    harness.delete_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")


def _current(flink: FlinkRestHook, prod: dict[str, Any]) -> dict[str, Any]:
    """``prod`` with ``job_id`` = production's one RUNNING job now (each test starts from what runs)."""
    running = [j.jid for j in flink.list_jobs().by_name(prod["name"]) if j.state == "RUNNING"]
    assert len(running) == 1, f"production should run once before the test: {running}"
    prod["job_id"] = running[0]
    return prod


def _hold_production(stack: Any, prod: dict[str, Any]) -> None:
    """Close the gate and feed one record; return once the operator holds it (every barrier waits)."""
    held = Path(f"{prod['gate']}.held")
    held.unlink(missing_ok=True)
    prod["gate"].touch()
    harness.produce(stack.kafka_bootstrap, f"{prod['name']}-in", range(prod["fed"], prod["fed"] + 1))
    prod["fed"] += 1
    deadline = time.monotonic() + 120
    while not held.exists():
        assert time.monotonic() < deadline, "the gated record never reached the operator"
        time.sleep(0.1)


def _open_gate(prod: dict[str, Any]) -> None:
    Path(prod["gate"]).unlink(missing_ok=True)


class RecordingResume(ResumeJobOperator):
    """The real resume; records what it found when it started (was this run's stop still in flight?), then
    opens production's gate so that Flink can finish that stop while resume waits for it."""

    gate: Path | None = None
    direct_url = ""  # production's REST port, not the one the operator uses (the 503 proxy's)

    def execute(self, context: Any) -> Any:
        hook, ti = FlinkRestHook(settings=FlinkRestSettings(base_url=self.direct_url)), context["ti"]
        job_id = str(self.quiesce.production_job_id)
        first = operation_trigger_id(ti.dag_id, ti.run_id, "quiesce", -1, job_id, "stop", 0)
        status = hook.operation_status(job_id, first)
        RESULTS.setdefault(ti.dag_id, {}).setdefault("resume_started", []).append(
            {"job_state": hook.get_job(job_id).state, "stop": status.status if status else None}
        )
        if self.gate is not None:
            self.gate.unlink(missing_ok=True)
        result = super().execute(context)
        RESULTS[ti.dag_id]["resume"] = result
        return result


class RecordingCheck(AssertProductionOperator):
    def execute(self, context: Any) -> Any:
        result = super().execute(context)
        RESULTS.setdefault(context["ti"].dag_id, {})["check"] = result
        return result


_CHILD = """
import json, sys
from types import SimpleNamespace
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator
a = json.loads(sys.argv[1])
op = QuiesceAndSavepointOperator(task_id=a["task_id"], job_id=a["job_id"], mode="stop", timeout=600, deferrable=False)
op.__dict__["hook"] = FlinkRestHook(settings=FlinkRestSettings(base_url=a["url"]))
ti = SimpleNamespace(dag_id=a["dag_id"], run_id=a["run_id"], task_id=a["task_id"], map_index=-1, try_number=1,
                     xcom_push=lambda **kw: None)
op.execute({"ti": ti, "run_id": a["run_id"]})
print("quiesce finished: not killed in time", flush=True)
"""


class KilledMidStop(QuiesceAndSavepointOperator):
    """The quiesce task's worker killed while Flink stops production: the real operator runs in a child
    process, which gets SIGKILL as soon as Flink reports this run's stop IN_PROGRESS."""

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        args = {"task_id": ti.task_id, "job_id": self.job_id, "dag_id": ti.dag_id, "run_id": ti.run_id,
                "url": self.hook.base_url}  # fmt: skip
        child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(args)], env=os.environ.copy())
        trigger_id = operation_trigger_id(ti.dag_id, ti.run_id, ti.task_id, -1, self.job_id, "stop", 0)
        deadline = time.monotonic() + 240
        while child.poll() is None and time.monotonic() < deadline:
            status = self.hook.operation_status(self.job_id, trigger_id)
            if status is not None and status.status == "IN_PROGRESS":
                child.send_signal(signal.SIGKILL)
                child.wait()
                RESULTS.setdefault(ti.dag_id, {})["killed_mid_stop"] = True
                raise RuntimeError("quiesce worker SIGKILLed while Flink's stop-with-savepoint was in progress")
            time.sleep(0.2)
        child.kill()
        raise AssertionError(f"the stop never showed IN_PROGRESS before the child ended (exit {child.returncode})")


def _run(stack: Any, prod: dict[str, Any], quiesce: Any, resume_conn: str = "flink_default") -> str:
    """quiesce → resume (retried) → assert_production; returns the dag id."""
    from airflow.sdk import DAG

    dag_id = harness.unique("pcb-run")
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        q = quiesce(task_id="quiesce", job_id=prod["job_id"], mode="stop")
        stopped = QuiesceRef(result=q.output, mode="stop", production_job_id=prod["job_id"])
        resume = RecordingResume(
            task_id="resume_production", program=prod["program"].model_dump(), quiesce=stopped,
            job_name=prod["name"], flink_conn_id=resume_conn,
            timeout=180, stop_timeout=300, retries=4, retry_delay=timedelta(seconds=1), retry_exponential_backoff=2.0,
        )  # fmt: skip
        check = RecordingCheck(
            task_id="assert_production", job_name=prod["name"], quiesce=stopped,
            program=prod["program"].model_dump(), timeout=180,
        )  # fmt: skip
        resume.gate, resume.direct_url = prod["gate"], stack.flink_rest_url
        q >> resume >> check
    state = harness.run_dag_test(dag, stack.connections_file).state
    RESULTS.setdefault(dag_id, {})["state"] = str(state)
    return dag_id


def _assert_production_back(stack: Any, flink: FlinkRestHook, prod: dict[str, Any], dag_id: str) -> None:
    """Production RUNNING from this run's savepoint, exactly one production job, nothing of a replay left."""
    run = RESULTS[dag_id]
    check = run.get("check")
    assert check is not None and check["production"] == "resumed", run
    assert f"/{dag_id}/" in check["savepoint"], "resumed from the savepoint of this run"
    live = [j for j in flink.list_jobs().by_name(prod["name"]) if j.state in LIVE]
    assert [(j.jid, j.state) for j in live] == [(check["job_id"], "RUNNING")], "exactly one production job"
    assert flink.get_job(prod["job_id"]).state == "FINISHED"  # the stopped one, never reattached to
    assert run["resume"]["reattached"] is False and run["resume"]["job_id"] == check["job_id"]
    _assert_no_replay_left(stack, dag_id)
    prod["job_id"] = check["job_id"]


def _assert_no_replay_left(stack: Any, dag_id: str) -> None:
    from confluent_kafka.admin import AdminClient

    from airflow_flink_replay.hooks.mem0 import Mem0Hook

    replay = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.replay_flink_rest_url or stack.flink_rest_url))
    assert not [j.name for j in replay.list_jobs().jobs if dag_id in j.name and j.state in LIVE]
    topics = AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if dag_id in t]
    assert Mem0Hook(config=stack.mem0_config()).count({"user_id": f"replay-{dag_id}"}) == 0


def test_quiesce_killed_mid_stop_production_comes_back(stack: Any, flink: FlinkRestHook, production: Any) -> None:
    prod = _current(flink, production)
    _hold_production(stack, prod)
    dag_id = _run(stack, prod, KilledMidStop)
    run = RESULTS[dag_id]
    assert run["killed_mid_stop"] and run["state"] == "success", run
    # the fault this guards against: resume started while production RAN with this run's stop in flight
    assert run["resume_started"][0] == {"job_state": "RUNNING", "stop": "IN_PROGRESS"}, run
    _assert_production_back(stack, flink, prod, dag_id)


def test_stop_longer_than_the_quiesce_timeout_production_comes_back(
    stack: Any, flink: FlinkRestHook, production: Any
) -> None:
    prod = _current(flink, production)
    _hold_production(stack, prod)

    def quiesce(**kwargs: Any) -> Any:
        return QuiesceAndSavepointOperator(timeout=1.0, poll_interval=0.2, deferrable=False, retries=0, **kwargs)

    dag_id = _run(stack, prod, quiesce)
    run = RESULTS[dag_id]
    assert run["state"] == "success", run
    assert run["resume_started"][0] == {"job_state": "RUNNING", "stop": "IN_PROGRESS"}, run
    _assert_production_back(stack, flink, prod, dag_id)


class Flaky503Proxy(RestFront):
    """Forwards to Flink's REST port, but answers 503 to the first ``failures`` requests."""

    def __init__(self, target: str, failures: int) -> None:
        self.failures, self.answered_503, self.forwarded = failures, 0, 0
        super().__init__(target, self._fault)

    def _fault(self, request: Any) -> tuple[int, bytes] | None:
        if self.answered_503 < self.failures:
            self.answered_503 += 1
            return 503, b'{"errors": ["Service Unavailable (fault injection)"]}'
        self.forwarded += 1
        return None


def test_rest_503_during_resume_is_retried_and_production_comes_back_once(
    stack: Any, flink: FlinkRestHook, production: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resume's first calls get 503 past the hook's own retries (3): the task fails, Airflow retries it
    with backoff, the retry submits production once (the 503s never reached Flink)."""
    prod = _current(flink, production)
    proxy = Flaky503Proxy(stack.flink_rest_url, failures=6)
    try:
        conn = json.loads(Path(stack.connections_file).read_text())["flink_default"]
        extra = {**json.loads(conn["extra"]), "retries": 3, "backoff_factor": 0.1}
        monkeypatch.setenv("AIRFLOW_CONN_FLINK_FLAKY", json.dumps({**conn, "host": proxy.url, "extra": extra}))

        def quiesce(**kwargs: Any) -> Any:
            return QuiesceAndSavepointOperator(timeout=300, poll_interval=0.5, deferrable=False, **kwargs)

        dag_id = _run(stack, prod, quiesce, resume_conn="flink_flaky")
    finally:
        proxy.close()
    run = RESULTS[dag_id]
    assert run["state"] == "success", run
    assert proxy.answered_503 == 6 and proxy.forwarded > 0
    assert len(run["resume_started"]) == 2, "the first try failed on the 503s, its retry brought production back"
    _assert_production_back(stack, flink, prod, dag_id)


class RecycleDuringReplay(threading.Thread):
    """Restarts the replay cluster (JobManager + TaskManager) once a replay job of ``prefix`` RUNS there, and
    only while no other job is live on it (the cluster is shared with other runs)."""

    def __init__(self, replay_url: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.hook = FlinkRestHook(settings=FlinkRestSettings(base_url=replay_url, retries=1))
        self.prefix, self.recycled_during, self.stop = prefix, "", threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        from airflow_flink_replay.local.stack import LocalStack

        while not self.stop.is_set():
            try:
                live = [j for j in self.hook.list_jobs().jobs if j.state in LIVE]
            except Exception:
                live = []
            ours = [j.name for j in live if j.name.startswith(self.prefix) and j.state == "RUNNING"]
            if ours and len(ours) == len(live):
                self.recycled_during = ours[0]
                try:
                    LocalStack().recycle_cluster("replay")  # waits until the new cluster has its TaskManager
                except Exception as err:  # reported by the test
                    self.error = err
                return
            self.stop.wait(0.5)


def test_replay_cluster_jobmanager_restarts_during_a_replay(stack: Any, airflow_db: Any, tmp_path: Path) -> None:
    """The replay cluster's JobManager restarts while a replay runs: the replay fails, the run fails, and
    production (on its own cluster) runs from this run's savepoint; the cleanup leaves nothing behind."""
    from confluent_kafka.admin import AdminClient

    from airflow_flink_replay.core.replay_job_spec import replay_job_name_prefix
    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.local.demo import V1
    from tests.dag_testing import deploy_test_production, run_replay_dag, running_jobs, stop_production

    if not stack.replay_flink_rest_url:
        pytest.skip("the stack runs without a replay cluster (--no-replay-cluster)")
    prod = deploy_test_production(stack, tmp_path, "jmr", window_records=10)
    spec = ReplaySpec.from_yaml(prod["spec_path"])
    dag_id = f"gate_{spec.name.replace('-', '_')}"
    recycler = RecycleDuringReplay(stack.replay_flink_rest_url, f"afr-replay-{dag_id}-")
    recycler.start()
    try:
        dagrun, run = run_replay_dag(stack, prod, {"candidate": V1}, kind="gate", feed_from=2000)
        recycler.stop.set()
        recycler.join(300)
        states = run["states"]
        assert recycler.recycled_during, "the replay cluster was recycled while a replay of this run ran"
        assert recycler.error is None and not recycler.is_alive(), recycler.error
        assert str(dagrun.state) == "failed"
        # a replay fails while it runs (its wait fails) or while it is submitted (the submission fails)
        replays = {states["submit_replays"], *(states[f"replay_{v}"] for v in ("baseline", "baseline_2", "candidate"))}
        assert "failed" in replays, states
        for task in ("resume_production", "assert_production", "cancel_leftover_replays", "delete_replay_topics",
                     "drop_forks"):  # fmt: skip
            assert states[task] == "success", (task, states)
        assert len(running_jobs(stack, prod["job_name"])) == 1, "exactly one production job, RUNNING"
        replay = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.replay_flink_rest_url))
        prefix = replay_job_name_prefix(dagrun.dag_id, dagrun.run_id)
        assert not [j.jid for j in replay.list_jobs().jobs if j.name.startswith(prefix) and j.state in LIVE]
        topics = set(AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics)
        tag = dagrun.get_task_instances()[0].xcom_pull(task_ids="resolve", key="run_tag")
        assert not {spec.action_state_topic(tag, v) for v in ("baseline", "baseline_2", "candidate")} & topics
        memories = Mem0Hook(config=stack.mem0_config())
        for variant in ("baseline", "baseline_2", "candidate"):
            assert memories.count({"user_id": spec.fork_namespace(tag, variant)}) == 0
    finally:
        recycler.stop.set()
        stop_production(stack, prod)

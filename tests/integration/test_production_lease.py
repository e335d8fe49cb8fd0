"""Two DAGs of one production triggered at the same moment on a real scheduler (issue 42 §10).

``airflow standalone`` (LocalExecutor: tasks in parallel, each in a process of its own) runs the repository's DAG
files on a spec of a production of this module's own. The release gate and the manual replay DAG are triggered
together over the REST API while the test holds production's lease as a third run would; once both runs' quiesce
logged that they are waiting for it, the test releases it, and the two race for it:

- exactly one quiesce holds production at a time: the lease's generations never overlap, and each run's stop and
  resumed job lie inside its own generation; the other run waited, then quiesced the job the first one resumed
  (not the one its preflight saw), or failed having touched nothing (no stop, no savepoint folder);
- production ends RUNNING as exactly one job;
- no task of either run prescribes a restore, and both runs' ``assert_production`` pass.

Cost (2 cores): Airflow's start (~40 s, production deployed meanwhile), the two runs (~100-170 s: the second
run's replay either runs after the first's or not at all).
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dag_testing import deploy_planned_production, plan_test_production, running_jobs, stop_production

pytestmark = pytest.mark.timeout(900)
GATE, MANUAL = "flink_agents_release_gate", "flink_agents_replay"
#: how long each run waits for production's lease (the spec's ``lease_wait_minutes``)
LEASE_WAIT_MINUTES = 0.5
RESTORE_PHRASES = ("Restore production", "PRODUCTION IS NOT RUNNING")


@pytest.fixture(scope="module")
def scheduler(stack, tmp_path_factory) -> Any:
    """Airflow standalone on a production of this module's own (deployed while Airflow starts); both removed
    afterwards."""
    from airflow_flink_replay.local.airflow_runner import airflow_env
    from airflow_flink_replay.local.airflow_server import AirflowServer, free_port

    work = tmp_path_factory.mktemp("lease")
    production = plan_test_production(stack, work, "lease", window_records=8)
    spec = yaml.safe_load(Path(production["spec_path"]).read_text())
    Path(production["spec_path"]).write_text(yaml.safe_dump({**spec, "lease_wait_minutes": LEASE_WAIT_MINUTES}))
    server = AirflowServer(airflow_env(stack, work / "airflow", production["spec_path"]), free_port(),
                           work / "airflow.log", run_id_prefix="lease")  # fmt: skip
    server.launch()
    try:
        production = deploy_planned_production(stack, production)
        server.wait_healthy()
        for dag_id in (GATE, MANUAL):
            server.wait_for_dag(dag_id)
        yield {"server": server, "production": production, "runs_dir": work / "runs"}
    finally:
        server.stop()
        stop_production(stack, production)


def _task_log(server: Any, dag_id: str, run_id: str, task_id: str) -> str:
    """Every attempt's log of one task instance (Airflow's log folder), empty before it starts."""
    folder = server.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log"))) if folder.exists() else ""


def _wait_until_both_wait(server: Any, runs: dict[str, str], holder: str, timeout: float = 300) -> None:
    """Until each run's quiesce logged that production is held by ``holder`` (both wait for the lease)."""
    deadline = time.monotonic() + timeout
    while not all(holder in _task_log(server, dag, run, "quiesce") for dag, run in runs.items()):
        states = {dag: server.task_states(dag, run) for dag, run in runs.items()}
        ended = [dag for dag, st in states.items() if st.get("quiesce") in ("failed", "upstream_failed", "skipped")]
        assert not ended and time.monotonic() < deadline, f"not both waiting for the lease: {states}"
        time.sleep(2)


def _xcom(server: Any, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    try:
        return server.xcom(dag_id, run_id, task_id, key)
    except RuntimeError:  # no such XCom (HTTP 404)
        return None


def _at(value: str | None) -> datetime:
    assert value, value
    return datetime.fromisoformat(value)


def test_two_dags_of_one_production_never_quiesce_it_at_once(stack, scheduler) -> None:
    from airflow_flink_replay.core.production_lease import LeaseHolder, Production, lease_folder, of_run
    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.hooks.production_lease import ProductionLeaseHook
    from airflow_flink_replay.local.airflow_runner import find_run_record
    from airflow_flink_replay.local.demo import V1, ReviewFeeder
    from airflow_flink_replay.operators.flink import run_path_segment

    server, production = scheduler["server"], scheduler["production"]
    spec = ReplaySpec.from_yaml(production["spec_path"])
    identity = Production.of(stack.flink_rest_url, production["job_name"])
    lease = ProductionLeaseHook(lease_folder(spec.runs_uri), identity)
    third = LeaseHolder(dag_id="test_production_lease", run_id="hold", task_id="test")
    lease.acquire(third, ttl_s=600, wait_s=0)  # as a third run would: both runs reach their quiesce meanwhile
    started = time.monotonic()
    with ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=70_000, rate=5):
        runs = {dag_id: server.trigger(dag_id, {"candidate": V1}) for dag_id in (GATE, MANUAL)}
        _wait_until_both_wait(server, runs, third.label)
        lease.release(third, by="test")  # the two race for it
        states = {dag_id: server.wait_for_run(dag_id, run_id, timeout=600) for dag_id, run_id in runs.items()}
    print(f"both runs ended {time.monotonic() - started:.0f}s after the trigger: {states}")

    # --- one quiesce at a time: the generations never overlap, the first after the test's is one of the runs'
    history = lease.records()
    ours = [r for r in history if r.generation > of_run(history, third)[-1].generation]
    holders = {r.holder.label: r for r in ours if r.holder.task_id == "quiesce"}
    assert ours and all(r.released_at is not None for r in ours), [r.model_dump(mode="json") for r in ours]
    for earlier, later in itertools.pairwise(ours):
        assert earlier.released_at is not None and later.acquired_at >= earlier.released_at, (earlier, later)
    winner_label = ours[0].holder.label
    labels = {dag_id: f"{dag_id}/{run_id}" for dag_id, run_id in runs.items()}
    assert winner_label in labels.values(), winner_label
    winner = next(d for d, label in labels.items() if label == winner_label)
    loser = next(d for d in runs if d != winner)
    print(f"winner: {winner}; loser: {loser}; lease history: {[(r.generation, r.holder.label) for r in ours]}")

    records = {d: find_run_record(scheduler["runs_dir"] / d, runs[d])[1] or {} for d in runs}
    won = records[winner]
    assert states[winner] == "success", server.task_states(winner, runs[winner])
    _assert_stopped_inside_its_lease(won, holders[labels[winner]])
    assert won["lease"]["holder"] == labels[winner] and won["lease"]["released_at"], won["lease"]

    lost_quiesce = _xcom(server, loser, runs[loser], "quiesce")
    if lost_quiesce is None:  # the loser gave up waiting: it touched nothing
        refused = _xcom(server, loser, runs[loser], "quiesce", "lease")
        assert refused and refused["held_by"] == labels[winner] and refused["holder"] is None, refused
        assert "touched nothing (no stop, no savepoint)" in _task_log(server, loser, runs[loser], "quiesce")
        assert not (Path(stack.savepoint_dir) / run_path_segment(loser, runs[loser]).strip("/")).exists()
        assert labels[loser] not in holders
        loser_check = _xcom(server, loser, runs[loser], "assert_production")
        assert loser_check["production"] in ("held_by_other", "resumed_by_other"), loser_check
    else:  # the loser waited, then quiesced the job the winner had resumed (not the one its preflight saw)
        assert states[loser] == "success", server.task_states(loser, runs[loser])
        _assert_stopped_inside_its_lease(records[loser], holders[labels[loser]])
        assert lost_quiesce["job_id"] == won["production_resumed"]["job_id"], lost_quiesce["job_id"]
        assert records[loser]["lease"]["waited_s"] > 0, records[loser]["lease"]
    for dag_id, run_id in runs.items():
        assert server.task_states(dag_id, run_id)["assert_production"] == "success", dag_id
        for task_id in server.task_instances(dag_id, run_id):
            text = _task_log(server, dag_id, run_id, task_id)
            assert not [p for p in RESTORE_PHRASES if p in text], (dag_id, task_id)

    # --- production RUNS, once; the UI's Variable says the lease is free and who had it last
    assert len(running_jobs(stack, production["job_name"])) == 1
    variable = server.api("GET", f"/variables/flink_replay_lease__{identity.key}")
    assert json.loads(variable["value"])["state"].startswith("free (last: run "), variable


def _assert_stopped_inside_its_lease(record: dict[str, Any], held: Any) -> None:
    """The run's stop and its resumed job's RUNNING lie inside its own lease generation."""
    savepoint, resumed = record["savepoint"], record["production_resumed"]
    assert held.released_at is not None
    assert held.acquired_at <= _at(savepoint["requested_at"]) <= held.released_at, (held, savepoint["requested_at"])
    assert _at(resumed["running_at"]) <= held.released_at, (held, resumed)

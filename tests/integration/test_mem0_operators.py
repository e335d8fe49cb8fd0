"""Mem0 fork operators under real Airflow ``dag.test()`` with a connections file → the stack's Chroma.

fork → (the replay writes into its namespace, production writes into its own) → verify-untouched (passes,
reporting production's write) → drop, plus an idempotent second fork task; a DAG where a fork copy leaks
into production: verify-untouched fails with its report pushed, the all_done drop still cleans up; and a
DAG whose fork target is a namespace in use: the fork fails, the all_done drop runs and refuses to drop a
namespace that is not a fork.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.hooks.mem0 import Mem0Hook
from tests.dag_testing import register_dag
from tests.integration.mem0_fixtures import drop_collection, seed, store_config

RESULTS: dict[str, dict[str, Any]] = {}
PROD = "prod-job-op"


@pytest.fixture
def mem0_conn(airflow_db: Path, stack: Any, tmp_path: Path) -> Any:
    """A connections file with a ``mem0`` connection on a fresh Chroma collection, seeded with production data."""
    config = store_config("chroma", tmp_path, stack.chroma_host, stack.chroma_port)
    conn_file = tmp_path / "connections.json"
    conn_id = f"mem0_optest_{uuid.uuid4().hex[:8]}"  # unique: connections may be cached per process
    conn_file.write_text(json.dumps({conn_id: {"conn_type": "mem0", "extra": json.dumps(config)}}))
    hook = Mem0Hook(config=config)
    seed(hook.get_memory(), PROD, 300, via_add=20, keys=10)
    seed(hook.get_memory(), "busy-namespace", 5, via_add=0)
    yield hook, str(conn_file), conn_id
    drop_collection(hook.get_memory())


def test_fork_verify_drop_dag(mem0_conn: Any) -> None:
    from airflow.sdk import DAG, task

    from airflow_flink_replay.operators.mem0 import (
        DropMem0ForkOperator,
        ForkMem0NamespaceOperator,
        VerifyMem0UntouchedOperator,
    )

    hook, conn_file, conn_id = mem0_conn
    before = hook.fingerprint(PROD).digest
    with DAG(
        "mem0_fork_ops", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, params={"keep_fork": True}
    ) as dag:
        fork = ForkMem0NamespaceOperator(
            task_id="fork", source={"user_id": PROD}, target="replay-optest", fork_id="op-run", mem0_conn_id=conn_id
        )
        fork_again = ForkMem0NamespaceOperator(
            task_id="fork_again", source=PROD, target="replay-optest", fork_id="op-run", mem0_conn_id=conn_id
        )

        @task
        def replay_writes() -> None:
            memory = Mem0Hook(mem0_conn_id=conn_id).get_memory()
            memory.add("the replay learned this", user_id="replay-optest", agent_id="key-1", run_id="ltm", infer=False)
            # production resumed after the savepoint and keeps writing its own namespace
            memory.add("production learned this", user_id=PROD, agent_id="key-2", run_id="ltm", infer=False)

        verify = VerifyMem0UntouchedOperator(task_id="verify", target="replay-optest", mem0_conn_id=conn_id)
        kept = DropMem0ForkOperator(
            task_id="drop_kept", namespace="replay-optest", keep="{{ params.keep_fork }}", mem0_conn_id=conn_id
        )
        drop = DropMem0ForkOperator(task_id="drop", namespace="replay-optest", mem0_conn_id=conn_id)

        @task
        def record(
            f: dict[str, Any], f2: dict[str, Any], v: dict[str, Any], k: dict[str, Any], d: dict[str, Any]
        ) -> None:
            RESULTS["ops"] = {"fork": f, "fork_again": f2, "verify": v, "kept": k, "drop": d}

        written = replay_writes()
        fork >> fork_again >> written >> verify >> kept >> drop
        record(fork.output, fork_again.output, verify.output, kept.output, drop.output)

    register_dag(dag, "mem0-fork-tests")
    dr = dag.test(conn_file_path=conn_file)
    assert dr.state == "success"
    got = RESULTS["ops"]
    assert got["fork"]["count"] == 300 and got["fork"]["noop"] is False
    assert got["fork"]["source"] == {"user_id": PROD, "agent_id": None, "run_id": None}
    assert got["fork"]["target"]["user_id"] == "replay-optest"
    assert got["fork"]["source_fingerprint"] == before and got["fork"]["duration_s"] >= 0
    assert got["fork_again"]["noop"] is True and got["fork_again"]["count"] == 300
    verify = got["verify"]  # production's own write: reported, not a failure
    assert verify["ok"] and not verify["unchanged"] and not verify["replay_leak_ids"]
    assert len(verify["added"]) == 1 and verify["production_change_ids"] == verify["added"]
    assert not verify["removed"] and not verify["changed"] and verify["fingerprint_at_fork"] == before
    assert "change(s) by production itself since the fork; none from the replay" in verify["reason"]
    assert got["kept"]["kept"] is True and got["kept"]["dropped"] == 0
    assert got["drop"]["dropped"] == 301 and got["drop"]["fork_id"] == "op-run"
    assert hook.count("replay-optest") == 0
    assert hook.count(PROD) == 301 and hook.fingerprint(PROD).digest == verify["fingerprint_now"]


def test_verify_fails_on_replay_leak(mem0_conn: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """A fork copy written into production's namespace fails verify-untouched (report pushed to XCom,
    clear message); production's own write is listed as such; the all_done drop still removes the fork."""
    from airflow.sdk import DAG, task

    from airflow_flink_replay.memory.stores import StoredMemory
    from airflow_flink_replay.operators.mem0 import (
        DropMem0ForkOperator,
        ForkMem0NamespaceOperator,
        VerifyMem0UntouchedOperator,
    )

    hook, conn_file, conn_id = mem0_conn
    with DAG("mem0_fork_leak", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        fork = ForkMem0NamespaceOperator(
            task_id="fork", source=PROD, target="replay-leak", fork_id="leak-run", mem0_conn_id=conn_id
        )

        @task
        def replay_leaks() -> dict[str, str]:
            h = Mem0Hook(mem0_conn_id=conn_id)
            copy = h.list_memories("replay-leak", with_vectors=True)[0]
            leaked = StoredMemory(id=str(uuid.uuid4()), payload={**copy.payload, "user_id": PROD},
                                  vector=copy.vector, document=copy.document)  # fmt: skip
            h.get_store().insert([leaked])  # e.g. a replay job that wrote as production
            added = h.get_memory().add("production's own", user_id=PROD, agent_id="key-3", run_id="ltm", infer=False)
            return {"leaked": leaked.id, "production": added["results"][0]["id"]}

        verify = VerifyMem0UntouchedOperator(task_id="verify", target="replay-leak", mem0_conn_id=conn_id, retries=0)
        drop = DropMem0ForkOperator(task_id="drop", namespace="replay-leak", mem0_conn_id=conn_id)
        fork >> replay_leaks() >> verify >> drop

    register_dag(dag, "mem0-fork-tests")
    dr = dag.test(conn_file_path=conn_file)
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states == {"fork": "success", "replay_leaks": "success", "verify": "failed", "drop": "success"}
    # (the run's state is its leaf's, the all_done drop; the replay DAGs end in run_record, which fails the run)
    ti = dr.get_task_instances()[0]
    ids = ti.xcom_pull(task_ids="replay_leaks")
    report = ti.xcom_pull(task_ids="verify", key="report")
    assert report["ok"] is False and report["replay_leak_ids"] == [ids["leaked"]]
    assert report["production_change_ids"] == [ids["production"]]
    assert sorted(report["added"]) == sorted(ids.values()) and report["count_now"] == 302
    message = f"1 change(s) to production namespace user_id={PROD} attributed to the replay"
    assert report["reason"].startswith(message)
    failure = next((line for line in capfd.readouterr().out.splitlines() if "AirflowFailException: " in line), "")
    assert message in failure and f"Replay leak ids: ['{ids['leaked']}']" in failure, failure
    assert hook.count("replay-leak") == 0  # the all_done drop ran after the failed check


def test_fork_into_namespace_in_use_fails_and_drop_refuses(mem0_conn: Any) -> None:
    from airflow.sdk import DAG

    from airflow_flink_replay.operators.mem0 import DropMem0ForkOperator, ForkMem0NamespaceOperator

    hook, conn_file, conn_id = mem0_conn
    before = hook.fingerprint("busy-namespace").digest
    with DAG("mem0_fork_conflict", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        fork = ForkMem0NamespaceOperator(
            task_id="fork", source=PROD, target="busy-namespace", mem0_conn_id=conn_id, retries=0
        )
        drop = DropMem0ForkOperator(task_id="drop", namespace="busy-namespace", mem0_conn_id=conn_id)
        fork >> drop

    register_dag(dag, "mem0-fork-tests")
    dr = dag.test(conn_file_path=conn_file)
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states == {"fork": "failed", "drop": "failed"}  # drop ran (all_done) and refused
    assert dr.state == "failed"
    assert hook.count("busy-namespace") == 5 and hook.fingerprint("busy-namespace").digest == before
    assert hook.count(PROD) == 300

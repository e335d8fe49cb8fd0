"""The Mem0 fork operators (operators/mem0.py): the pre-copy operator on a real embedded Qdrant, and on a
Chroma server that does not answer."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.hooks.mem0 import Mem0Hook
from airflow_flink_replay.operators.mem0 import ForkMem0NamespaceOperator, PrecopyMem0NamespaceOperator


def _connection(monkeypatch: pytest.MonkeyPatch, vector_store: dict[str, Any], tmp_path: Path) -> None:
    extra = {"vector_store": vector_store, "history_db_path": str(tmp_path / "history.db")}
    monkeypatch.setenv("AIRFLOW_CONN_MEM0_OPS", json.dumps({"conn_type": "mem0", "extra": extra}))


def test_precopy_then_fork_copies_the_delta(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    collection = f"afr_unit_{uuid.uuid4().hex[:8]}"
    _connection(
        monkeypatch,
        {"provider": "qdrant", "config": {"path": str(tmp_path / "q"), "collection_name": collection}},
        tmp_path,
    )
    args = {"source": "prod", "target": "replay-1", "fork_id": "run-1", "mem0_conn_id": "mem0_ops"}
    precopy = PrecopyMem0NamespaceOperator(task_id="precopy", **args)
    fork = ForkMem0NamespaceOperator(task_id="fork", **args)
    memory = precopy.hook.get_memory()
    fork.hook = precopy.hook  # one embedded Qdrant client per path
    for i in range(5):
        memory.add(f"customer {i} likes tea", user_id="prod", agent_id="k", run_id="ltm", infer=False)

    pre = precopy.execute({})
    assert pre is not None and (pre["kind"], pre["count"], pre["delta"]) == ("precopy", 5, False)
    memory.add("customer 9 likes coffee", user_id="prod", agent_id="k", run_id="ltm", infer=False)
    done = fork.execute({})
    assert done is not None and (done["kind"], done["delta"], done["added"], done["count"]) == ("fork", True, 1, 6)
    assert done["source_fingerprint"] == precopy.hook.fingerprint("prod").digest

    other = PrecopyMem0NamespaceOperator(task_id="p2", **{**args, "fork_id": "run-2"})
    other.hook = precopy.hook
    with pytest.raises(AirflowFailException, match="already holds fork 'run-1'"):  # refusals fail at once
        other.execute({})
    with pytest.raises(AirflowFailException, match="equals the source"):
        PrecopyMem0NamespaceOperator(task_id="p3", **{**args, "target": "prod"}).execute({})


def test_precopy_with_the_store_down_leaves_the_copy_to_the_fork(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A store error is no reason to fail the run before anything is stopped: the fork copies in full."""
    _connection(
        monkeypatch,
        {"provider": "chroma", "config": {"host": "127.0.0.1", "port": 1, "collection_name": "x"}},
        tmp_path,
    )
    op = PrecopyMem0NamespaceOperator(task_id="precopy", source="prod", target="replay-1", mem0_conn_id="mem0_ops")
    assert isinstance(op.hook, Mem0Hook)
    assert op.execute({}) is None


def test_one_task_drops_every_fork_and_names_what_it_could_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``DropMem0ForksOperator`` on a real embedded Qdrant: both forks are dropped although production's
    namespace, given by mistake between them, is refused; the task fails naming it and pushes what it dropped."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_flink_replay.operators.mem0 import DropMem0ForksOperator

    collection = f"afr_unit_{uuid.uuid4().hex[:8]}"
    _connection(
        monkeypatch,
        {"provider": "qdrant", "config": {"path": str(tmp_path / "q"), "collection_name": collection}},
        tmp_path,
    )
    forks = [ForkMem0NamespaceOperator(task_id=f"fork_{n}", source="prod", target=f"replay-{n}", fork_id=f"run-{n}",
                                       mem0_conn_id="mem0_ops") for n in (1, 2)]  # fmt: skip
    hook = forks[0].hook
    for fork in forks[1:]:
        fork.hook = hook  # one embedded Qdrant client per path
    for i in range(4):
        hook.get_memory().add(f"customer {i} likes tea", user_id="prod", agent_id="k", run_id="ltm", infer=False)
    for fork in forks:
        fork.execute({})
    drop = DropMem0ForksOperator(task_id="drop_forks", mem0_conn_id="mem0_ops",
                                 namespaces={"baseline": "replay-1", "oops": "prod", "candidate": "replay-2"})
    drop.hook = hook  # type: ignore[misc]
    pushed: dict[str, Any] = {}

    class TI:
        def xcom_push(self, key: str, value: Any) -> None:
            pushed[key] = value

    with pytest.raises(AirflowException, match="oops: NotAForkError"):
        drop.execute({"ti": TI()})
    assert set(pushed["dropped"]) == {"baseline", "candidate"}
    assert hook.count({"user_id": "replay-1"}) == hook.count({"user_id": "replay-2"}) == 0
    assert hook.count({"user_id": "prod"}) == 4  # production untouched

    # the retry drops what is left (nothing) and succeeds
    drop.namespaces = {"baseline": "replay-1", "candidate": "replay-2"}
    assert set(drop.execute({"ti": TI()})) == {"baseline", "candidate"}


def test_verify_skips_when_nothing_was_forked_and_fails_on_a_leak(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A run stopped before its fork (a refused agent check) has nothing to verify: skipped, not a second
    failure. After a fork the same task verifies as before (a leak that fails it:
    tests/integration/test_mem0_operators.py)."""
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_flink_replay.operators.mem0 import VerifyMem0UntouchedOperator

    collection = f"afr_unit_{uuid.uuid4().hex[:8]}"
    _connection(monkeypatch, {"provider": "qdrant", "config": {"path": str(tmp_path / "q"),
                                                               "collection_name": collection}}, tmp_path)
    verify = VerifyMem0UntouchedOperator(task_id="verify", target="replay-1", mem0_conn_id="mem0_ops")
    memory = verify.hook.get_memory()
    memory.add("customer 1 likes tea", user_id="prod", agent_id="k", run_id="ltm", infer=False)
    with pytest.raises(AirflowSkipException, match="nothing to verify: no complete fork in user_id=replay-1"):
        verify.execute({})
    fork = ForkMem0NamespaceOperator(task_id="fork", source="prod", target="replay-1", fork_id="run-1",
                                     mem0_conn_id="mem0_ops")
    fork.hook = verify.hook
    fork.execute({})
    assert verify.execute({})["ok"]

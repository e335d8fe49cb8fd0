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

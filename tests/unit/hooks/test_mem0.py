"""``Mem0Hook`` (``hooks/mem0.py``): the backend is chosen once, from the connection, and every namespace
operation goes through it.

Real parts: Airflow connections from ``AIRFLOW_CONN_*`` variables, and for the vector-store backend a real
mem0 ``Memory`` (offline hashing embedder) on an embedded Qdrant in a temporary folder. The Mem0 platform
cannot be reached here (``MemoryClient`` pings it when built), so the hosted backend is only built.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.memory_fork import FORK_ID_FIELD, Mem0Namespace
from airflow_flink_replay.hooks.mem0 import Mem0Hook
from airflow_flink_replay.memory.hosted import HostedMem0Backend
from airflow_flink_replay.memory.oss import OssMem0Backend


def _qdrant_config(tmp_path: Path) -> dict[str, Any]:
    collection = f"afr_unit_{uuid.uuid4().hex[:8]}"
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {"path": str(tmp_path / "qdrant"), "collection_name": collection},
        },
        "history_db_path": str(tmp_path / "history.db"),
    }


def test_hook_selects_the_backend_from_the_extra() -> None:
    hosted = Mem0Hook(config={"backend": "hosted", "host": "https://mem0.example", "page_size": 50})
    backend = hosted.get_hosted()  # built without contacting the platform
    assert isinstance(backend, HostedMem0Backend) and (backend.host, backend.page_size) == ("https://mem0.example", 50)
    assert hosted.get_backend() is backend and hosted.is_hosted()
    with pytest.raises(ValueError, match=r"hosted backend: there is no local mem0\.Memory"):
        hosted.get_memory()
    with pytest.raises(ValueError, match=r"hosted backend: there is no local mem0\.Memory"):
        hosted.get_store()
    oss = Mem0Hook(config={"vector_store": {"provider": "chroma"}, "offline_embedder": "minilm", "reembed": True})
    assert oss.backend() == "oss" and not oss.is_hosted()
    built = oss.get_backend()  # nothing is connected before the first namespace operation
    assert isinstance(built, OssMem0Backend) and (built.embedder, built.reembed) == ("minilm", True)
    assert built.config == {"vector_store": {"provider": "chroma"}}  # the hook's own keys are not mem0's
    with pytest.raises(ValueError, match=r"extra\.backend is 'cloud'; use 'oss'"):
        Mem0Hook(config={"backend": "cloud"}).count("job-1")
    ok, message = Mem0Hook(config={"backend": "cloud"}).test_connection()
    assert not ok and "extra.backend is 'cloud'" in message
    with pytest.raises(ValueError, match=r'set extra\.backend to "hosted"'):
        Mem0Hook(config={}).get_hosted()
    with pytest.raises(ValueError, match=r"extra\.offline_embedder: use hashing, minilm or config, not 'bert'"):
        Mem0Hook(config={"offline_embedder": "bert"}).get_backend()


def test_backend_is_chosen_once_from_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection is read when the backend is first needed; the hook keeps that backend."""
    conn = {
        "conn_type": "mem0",
        "host": "https://mem0.example",
        "password": "key-from-password",
        "extra": {"backend": "hosted", "api_key": "key-from-extra", "settle_timeout_s": 30},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MEM0_UNIT", json.dumps(conn))
    hook = Mem0Hook(mem0_conn_id="mem0_unit")
    backend = hook.get_hosted()
    assert backend.host == "https://mem0.example" and backend.settle_timeout_s == 30.0
    assert backend.client_kwargs["api_key"] == "key-from-password"  # the password wins over extra.api_key

    # the connection now names a vector store: this hook keeps its backend, a new hook picks the new one
    oss_conn = {"conn_type": "mem0", "extra": {"vector_store": {"provider": "chroma"}}}
    monkeypatch.setenv("AIRFLOW_CONN_MEM0_UNIT", json.dumps(oss_conn))
    assert hook.get_backend() is backend and hook.is_hosted()
    assert isinstance(Mem0Hook(mem0_conn_id="mem0_unit").get_backend(), OssMem0Backend)


def test_oss_backend_from_the_connection_on_a_local_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fork → verify → drop through the hook on a real embedded Qdrant, the backend built once."""
    config = _qdrant_config(tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_MEM0_LOCAL", json.dumps({"conn_type": "mem0", "extra": config}))
    hook = Mem0Hook(mem0_conn_id="mem0_local")
    backend = hook.get_backend()
    assert isinstance(backend, OssMem0Backend)
    memory = hook.get_memory()
    assert memory is backend.memory and hook.get_store() is backend.store and hook.get_backend() is backend
    for i in range(6):
        memory.add(
            f"customer {i} prefers green tea", user_id="prod", agent_id=f"key-{i % 2}", run_id="ltm", infer=False
        )
    collection = config["vector_store"]["config"]["collection_name"]
    assert hook.test_connection() == (True, f"mem0 qdrant collection {collection!r} reachable")

    before = hook.fingerprint("prod")
    result = hook.fork("prod", "replay-1", fork_id="run-1")
    assert (result.count, result.noop, result.store, result.history_rows) == (6, False, "qdrant", 6)
    assert result.source_fingerprint == before.digest and before.count == 6
    assert hook.fork("prod", "replay-1", fork_id="run-1").noop
    manifest = hook.read_manifest("replay-1")
    assert manifest is not None and manifest.source == Mem0Namespace(user_id="prod")
    assert sorted(hook.read_snapshot(manifest)) == sorted(r.id for r in hook.list_memories("prod"))
    copies = hook.list_memories("replay-1", with_vectors=True)
    assert len(copies) == 6 and all(r.payload[FORK_ID_FIELD] == "run-1" and r.dense() for r in copies)

    assert hook.verify_untouched("replay-1").unchanged
    memory.add("production wrote after resume", user_id="prod", agent_id="key-0", run_id="ltm", infer=False)
    report = hook.verify_untouched("replay-1")
    assert report.ok and len(report.added) == 1 and report.production_change_ids == report.added
    assert not hook.verify_untouched("replay-1", production_writes_expected=False).ok
    with pytest.raises(RuntimeError, match="no complete fork in user_id=prod"):
        hook.verify_untouched("prod")

    dropped = hook.drop("replay-1")
    assert (dropped.dropped, dropped.fork_id, dropped.history_rows) == (6, "run-1", 6)
    assert hook.count("replay-1") == 0 and hook.count("prod") == 7 and hook.read_manifest("replay-1") is None


def test_the_chroma_view_reports_a_bad_setting_without_the_value_its_reference_resolved_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fork backend's Chroma client is built from the resolved config (chromadb echoes a bad port): the
    error names the reference, never the value (issue 42)."""
    import traceback

    from airflow_flink_replay.exceptions import SecretScrubbedError

    value = "afr-port-" + uuid.uuid4().hex
    monkeypatch.setenv("AFR_TEST_CHROMA_PORT", value)
    backend = OssMem0Backend(
        {"vector_store": {"provider": "chroma", "config": {"host": "127.0.0.1", "port": "${env:AFR_TEST_CHROMA_PORT}"}}}
    )
    with pytest.raises(SecretScrubbedError) as info:
        backend.store  # noqa: B018 - builds the client
    shown = f"{info.value}\n{info.value!r}\n{''.join(traceback.format_exception(info.value))}"
    assert value not in shown and "${env:AFR_TEST_CHROMA_PORT}" in str(info.value)

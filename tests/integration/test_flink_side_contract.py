"""The job-definition contract on the real local Flink: production and its replay apply ONE AgentJob.

Production runs ``production_job.py --agent-job tests.jobs.typed_echo:job`` (a pydantic input with an ``int``
id, keyed by that ``int``, an environment-level resource) over records written as raw bytes — non-canonical
JSON (spaces, key order, a non-ASCII character, an escaped one). Then it is stopped with a savepoint and the
replay job applies the same definition to the captured window from that savepoint. Asserted:

- the capture topic holds the input bytes unchanged, byte for byte, keyed by the agent key, with the
  provenance headers;
- production's agent received the user's type (``EchoInput``) with its typed key (``int``), and its
  environment-level resource answered;
- the replay's agent received the same types, its per-key counts continued from production's restored state
  (the pickled ``int`` key maps onto the savepoint's keyed state), and the environment-level resource was
  mediated by the replay policy (audited) like an agent-level one.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.audit import read_audit
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from tests.integration import flink_side_helpers as fh

JOB = "tests.jobs.typed_echo:job"
AGENT_UID = "afr-agent"

#: Raw record values as a producer might write them: none is what json.dumps(sort_keys=True) would give.
RECORDS: list[bytes] = [
    b'{ "review": "great",  "id": 7 }',
    b'{"id":8,"review":"arrived late"}',
    '{"review": "très bien", "id": 7}'.encode(),
    b'{\n  "id": 8,\n  "review": "broken \\u00e9 box"\n}',
    b'{"id": 9, "review": "ok", "extra": [1, 2]}',
]
IDS = [7, 8, 7, 8, 9]


def _production_args(run: str, src: str, out: str, cap: str) -> list[str]:
    return [
        "--agent-job", JOB,
        "--bootstrap", fh.BOOTSTRAP,
        "--source-topic", src,
        "--sink-topic", out,
        "--capture-topic", cap,
        "--action-state-topic", f"ct-as-prod-{run}",
        "--job-identifier", f"ct-prod-{run}",
        "--agent-uid", AGENT_UID,
        "--max-parallelism", "128",
        "--jars", ",".join(fh.JARS),
        "--group-id", f"grp-ct-{run}",
        "--job-name", f"ct-prod-{run}",
    ]  # fmt: skip


def _produce(topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": fh.BOOTSTRAP})
    for i, raw in enumerate(RECORDS):  # one partition: the order of the records is the order of the keys
        producer.produce(topic, value=raw, key=f"k{i}".encode(), partition=0)
    producer.flush(30)


@pytest.fixture(scope="module")
def contract(stack: Any, tmp_path_factory: Any) -> Any:
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    # A fresh TaskManager first: an earlier module's job of the same tests.jobs package (the same isolated
    # package name) leaves that package in the shared interpreter with its since-deleted files as its path,
    # and this module's module of it then fails to import (docs/limitations.md).
    LocalStack(StackConfig()).restart_taskmanager("production")
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"ct-{run}")
    src, out, cap = f"ct-src-{run}", f"ct-out-{run}", f"ct-cap-{run}"
    fh.create_topics((src, 1), (out, 1), (cap, 2))
    jobs: list[str] = []
    try:
        prod = fh.submit(fh.PRODUCTION_JOB, _production_args(run, src, out, cap))
        jobs.append(prod)
        fh.wait_running_tasks(prod)
        produced_from = int(time.time() * 1000)
        _produce(src)
        prod_out = fh.wait_topic_count(out, 1, len(RECORDS))
        savepoint = fh.stop_with_savepoint(prod, fh.savepoint_dir(run))
        capture = fh.read_topic(cap, 2)
        spec = ReplayJobSpec(
            variant="baseline",
            agent_job=JOB,
            job_identifier=f"ct-replay-{run}",
            action_state_topic=f"ct-as-replay-{run}",
            production_action_state_topic=f"ct-as-prod-{run}",
            production_job_identifier=f"ct-prod-{run}",
            output_dir=str(tmp / "out"),
            audit_dir=str(tmp / "audit"),
            kafka_bootstrap=fh.BOOTSTRAP,
            capture_topic=cap,
            start_offsets={p: 0 for p in capture},
            end_offsets={p: len(ms) for p, ms in capture.items()},
            agent_uid=AGENT_UID,
            max_parallelism=128,
            connector_jars=fh.JARS,
            job_name=f"ct-replay-{run}",
        )
        replay = fh.job_id_of(
            fh.submit_async(fh.REPLAY_JOB, spec.to_argv(), savepoint=savepoint, allow_non_restored=True)
        )
        jobs.append(replay)
        fh.wait_state(replay, {"FINISHED"}, timeout=240)
        yield {
            "capture": capture,
            "produced_from": produced_from,
            "production": prod_out,
            "replay": fh.read_outputs(Path(spec.output_dir)),
            "audit": list(read_audit(spec.audit_dir)) if Path(spec.audit_dir).exists() else [],
            "job": f"ct-prod-{run}",
            "src": src,
        }
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, out, cap, f"ct-as-prod-{run}", f"ct-as-replay-{run}")
        fh.remove_savepoint_dir(run)


def test_capture_holds_the_input_bytes_unchanged(contract: Any) -> None:
    msgs = [m for ms in contract["capture"].values() for m in ms]
    assert sorted(m.value() for m in msgs) == sorted(RECORDS), "capture values = the produced bytes, byte for byte"
    for m in msgs:
        raw = m.value()
        assert m.key() == str(json.loads(raw)["id"]).encode(), "capture key = the agent key (the int id as text)"
        headers = {k: v.decode() for k, v in m.headers()}
        assert headers["afr-job"] == contract["job"]
        assert headers["afr-source-topic"] == contract["src"]
        assert int(headers["afr-captured-at"]) >= contract["produced_from"]
    for ms in contract["capture"].values():  # per key, the capture keeps the order the records came in
        seen = [m.value() for m in ms]
        for key in {json.loads(v)["id"] for v in seen}:
            assert [v for v in seen if json.loads(v)["id"] == key] == [r for r in RECORDS if json.loads(r)["id"] == key]


def test_production_agent_receives_the_users_type_with_its_typed_key(contract: Any) -> None:
    rows = contract["production"]
    assert sorted(r["id"] for r in rows) == sorted(IDS)
    assert {(r["input_type"], r["key_type"]) for r in rows} == {("EchoInput", "int")}
    assert sorted((r["id"], r["count"]) for r in rows) == [(7, 1), (7, 2), (8, 1), (8, 2), (9, 1)]
    by_count = {(r["id"], r["count"]): r["store"] for r in rows}
    assert by_count[(7, 2)] == f"seen {len('très bien')} chars", "the deserializer got the UTF-8 bytes unchanged"
    assert by_count[(8, 2)] == f"seen {len('broken é box')} chars"


def test_replay_applies_the_same_definition_from_productions_state(contract: Any) -> None:
    rows = contract["replay"]
    assert sorted(r["id"] for r in rows) == sorted(IDS), "exactly the captured window"
    assert {(r["input_type"], r["key_type"]) for r in rows} == {("EchoInput", "int")}
    # the per-key counts continue from the savepoint: the int keys map onto production's keyed state
    assert sorted((r["id"], r["count"]) for r in rows) == [(7, 3), (7, 4), (8, 3), (8, 4), (9, 2)]
    production = {(r["id"], r["count"] - 2 if r["id"] != 9 else r["count"] - 1): r["store"] for r in rows}
    assert production == {(r["id"], r["count"]): r["store"] for r in contract["production"]}


def test_replay_policy_mediates_the_environment_level_resource(contract: Any) -> None:
    calls = [a for a in contract["audit"] if a.resource_name == "echo_store"]
    assert len(calls) == len(RECORDS), contract["audit"]
    assert {(a.resource_type, a.method, a.decision, a.outcome) for a in calls} == {
        ("vector_store", "query", "allow", "ok")
    }


PLAN_SCRIPT = """
import json, sys
from flink_agents.api.resource import ResourceType
from flink_agents.examples.quickstart.agents.custom_types_and_resources import ollama_server_descriptor
from flink_agents.examples.quickstart.agents.review_analysis_agent import ReviewAnalysisAgent
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource, FieldKey
from airflow_flink_replay.flink.proxies import rewrite_plan_resources
from tests.jobs.typed_echo import job as echo

quickstart = AgentJob(
    agent=ReviewAnalysisAgent,
    key_selector=FieldKey("id"),
    env_resources=[EnvResource("ollama_server", ResourceType.CHAT_MODEL_CONNECTION, ollama_server_descriptor)],
)
out = {}
for name, job in (("echo", echo), ("quickstart", quickstart)):
    plan = job.build_plan()
    providers = {t.value: sorted(p) for t, p in plan.resource_providers.items()}
    out[name] = {"providers": providers, "report": rewrite_plan_resources(plan, ReplayPolicy(), "v", sys.argv[1])}
print(json.dumps(out))
"""


def test_env_level_resources_join_the_plan_and_the_policy_wraps_them(tmp_path: Path) -> None:
    """Without Flink: the plan a definition builds holds its env-level resources, and the replay's plan hook
    wraps them like the agent's own (a chat model connection is reached through the proxied setup)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    python = root / ".stack" / "flink-venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("no Flink-side venv (.stack/flink-venv)")
    done = subprocess.run(
        [str(python), "-c", PLAN_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=180, cwd=root
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["echo"]["providers"]["vector_store"] == ["echo_store"]
    assert out["echo"]["report"] == {"wrapped": ["vector_store:echo_store"], "unmediated": []}
    quick = out["quickstart"]
    assert quick["providers"]["chat_model_connection"] == ["ollama_server"], "the env-level connection is in the plan"
    assert set(quick["report"]["wrapped"]) == {"tool:notify_shipping_manager", "chat_model:review_analysis_model"}

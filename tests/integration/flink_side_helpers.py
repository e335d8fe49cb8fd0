"""Tiny helpers for the Flink-side integration tests: REST submission of Python jobs, savepoints, Kafka I/O.

Deliberately independent of the Airflow hooks (another part of the project); only ``requests`` and
``confluent_kafka``.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
STACK = json.loads((ROOT / ".stack" / "stack.json").read_text())
REST = STACK["flink_rest_url"]
BOOTSTRAP = STACK["kafka_bootstrap"]
JARS = STACK["connector_jars"]
FLINK_HOME = Path(STACK["flink_home"])
PRODUCTION_JOB = ROOT / "airflow_flink_replay" / "flink" / "production_job.py"
REPLAY_JOB = ROOT / "airflow_flink_replay" / "flink" / "replay_job.py"
_JAR_ID: dict[str, str] = {}


def _python_jar_id() -> str:
    if "id" not in _JAR_ID:
        jar = next((FLINK_HOME / "opt").glob("flink-python-*.jar"))
        with jar.open("rb") as fh:
            r = requests.post(f"{REST}/jars/upload", files={"jarfile": (jar.name, fh, "application/x-java-archive")},
                              timeout=120)
        r.raise_for_status()
        _JAR_ID["id"] = r.json()["filename"].rsplit("/", 1)[-1]
    return _JAR_ID["id"]


def submit(script: Path, args: list[str], savepoint: str | None = None, allow_non_restored: bool = False) -> str:
    """Submit a PyFlink program through the REST PythonDriver; returns the job id."""
    body: dict[str, Any] = {
        "entryClass": "org.apache.flink.client.python.PythonDriver",
        "programArgsList": ["-py", str(script), *args],
    }
    if savepoint:
        body["savepointPath"] = savepoint
        body["allowNonRestoredState"] = allow_non_restored
    # The JobManager runs one PythonDriver gateway at a time: a concurrent Python submission (another test or
    # helper on the shared cluster) fails in PythonEnvUtils.setGatewayServer. Retry those.
    for attempt in range(8):
        r = requests.post(f"{REST}/jars/{_python_jar_id()}/run", json=body, timeout=300)
        if r.status_code == 200:
            return r.json()["jobid"]
        if "setGatewayServer" not in r.text and "caused an error: null" not in r.text:
            break
        time.sleep(2 + attempt)
    raise AssertionError(f"submit {script.name} failed: {r.status_code} {r.text[:2000]}")


def job_state(job_id: str) -> str:
    return requests.get(f"{REST}/jobs/{job_id}", timeout=30).json()["state"]


def wait_state(job_id: str, states: set[str], timeout: float = 120) -> str:
    deadline = time.time() + timeout
    state = ""
    while time.time() < deadline:
        state = job_state(job_id)
        if state in states:
            return state
        if state in {"FAILED", "CANCELED"} and state not in states:
            raise AssertionError(f"job {job_id} is {state}: {exceptions(job_id)[:3000]}")
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {state} after {timeout}s (wanted {states}): {exceptions(job_id)[:2000]}")


def wait_running_tasks(job_id: str, timeout: float = 120) -> None:
    """Until the job and all its vertices are RUNNING (the source reads)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = requests.get(f"{REST}/jobs/{job_id}", timeout=30).json()
        if info["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in info["vertices"]):
            return
        if info["state"] in {"FAILED", "CANCELED", "FINISHED"}:
            raise AssertionError(f"job {job_id} is {info['state']}: {exceptions(job_id)[:3000]}")
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not running after {timeout}s")


def exceptions(job_id: str) -> str:
    try:
        d = requests.get(f"{REST}/jobs/{job_id}/exceptions", timeout=30).json()
    except Exception as exc:  # pragma: no cover - diagnostics only
        return str(exc)
    return "\n".join(e.get("stacktrace", "")[:1500] for e in d.get("exceptionHistory", {}).get("entries", [])[:3])


def stop_with_savepoint(job_id: str, target: str, drain: bool = False, timeout: float = 120) -> str:
    r = requests.post(f"{REST}/jobs/{job_id}/stop", json={"targetDirectory": target, "drain": drain}, timeout=30)
    r.raise_for_status()
    trigger = r.json()["request-id"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = requests.get(f"{REST}/jobs/{job_id}/savepoints/{trigger}", timeout=30).json()
        if st["status"]["id"] == "COMPLETED":
            op = st["operation"]
            if "failure-cause" in op:
                raise AssertionError(f"savepoint failed: {json.dumps(op['failure-cause'])[:2000]}")
            return op["location"]
        time.sleep(0.3)
    raise AssertionError(f"savepoint of {job_id} not done after {timeout}s")


def cancel(job_id: str) -> None:
    try:
        if job_state(job_id) not in {"FINISHED", "FAILED", "CANCELED"}:
            requests.patch(f"{REST}/jobs/{job_id}?mode=cancel", timeout=30)
    except Exception:  # pragma: no cover - best-effort cleanup
        pass


def agent_vertex_id(job_id: str) -> str:
    """The plan vertex id of the vertex containing the agent operator."""
    plan = requests.get(f"{REST}/jobs/{job_id}/plan", timeout=30).json()["plan"]
    for node in plan["nodes"]:
        if "action-execute-operator" in node.get("description", ""):
            return node["id"]
    raise AssertionError("no action-execute-operator vertex in the plan")


# ------------------------------------------------------------------------------------------------ kafka
def create_topics(*specs: tuple[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for f in admin.create_topics([NewTopic(t, p, 1) for t, p in specs]).values():
        f.result()


def delete_topics(*topics: str) -> None:
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
        for f in admin.delete_topics(list(topics)).values():
            with contextlib.suppress(Exception):
                f.result()
    except Exception:  # pragma: no cover
        pass


def end_offsets(topic: str, partitions: int) -> dict[int, int]:
    """Per-partition count of records (read, not the high watermark: tansu's is unreliable for batches)."""
    return {p: len(v) for p, v in read_topic(topic, partitions).items()}


def read_topic(topic: str, partitions: int, timeout: float = 5.0) -> dict[int, list[Any]]:
    """All records of ``topic`` by partition (Message objects), reading until idle."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"afr-test-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Any]] = defaultdict(list)
    idle_until = time.time() + timeout
    while time.time() < idle_until:
        msg = c.poll(0.3)
        if msg is None or msg.error():
            continue
        out[msg.partition()].append(msg)
        idle_until = time.time() + 1.5
    c.close()
    return {p: out.get(p, []) for p in range(partitions)}


def wait_topic_count(topic: str, partitions: int, n: int, timeout: float = 90) -> list[dict[str, Any]]:
    """Wait until ``topic`` holds at least ``n`` records; return the JSON values."""
    deadline = time.time() + timeout
    values: list[dict[str, Any]] = []
    while time.time() < deadline:
        values = [json.loads(m.value()) for ms in read_topic(topic, partitions, 1.0).values() for m in ms]
        if len(values) >= n:
            return values
        time.sleep(1)
    raise AssertionError(f"{topic} has {len(values)} records, expected {n}")


def read_outputs(output_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(output_dir.glob("*.jsonl")):
        if f.name.startswith("."):
            continue
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return rows

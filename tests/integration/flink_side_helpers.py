"""Tiny helpers for the Flink-side integration tests: REST submission of Python jobs, savepoints, Kafka I/O.

Deliberately independent of the Airflow hooks (another part of the project); only ``requests`` and
``confluent_kafka``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _stack() -> dict[str, Any]:
    """The running local stack (brought up with the same code as the ``stack`` fixture if it is not)."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    return json.loads(LocalStack(StackConfig()).up().model_dump_json())


def _rest() -> str:
    return str(_stack()["flink_rest_url"])


_LAZY = {
    "STACK": lambda: _stack(),
    "REST": lambda: _stack()["flink_rest_url"],
    "BOOTSTRAP": lambda: _stack()["kafka_bootstrap"],
    "JARS": lambda: _stack()["connector_jars"],
    "FLINK_HOME": lambda: Path(_stack()["flink_home"]),
}


def __getattr__(name: str) -> Any:
    """STACK, REST, BOOTSTRAP, JARS, FLINK_HOME: read when first used, not at import (collection) time."""
    if name in _LAZY:
        return _LAZY[name]()
    raise AttributeError(name)


PRODUCTION_JOB = ROOT / "airflow_flink_replay" / "flink" / "production_job.py"


def chroma() -> tuple[str, int]:
    """The stack's Chroma server (host, port)."""
    return str(_stack().get("chroma_host", "127.0.0.1")), int(_stack()["chroma_port"])


def mem0_config(collection: str) -> dict[str, Any]:
    """The agent's mem0 config: ``collection`` on the stack's Chroma server."""
    host, port = chroma()
    return {
        "vector_store": {"provider": "chroma", "config": {"host": host, "port": port, "collection_name": collection}}
    }


def production_args(
    run: str,
    *,
    uid: str,
    collection: str,
    namespace: str,
    src: str,
    out: str,
    cap: str,
    action_topic: str,
    name: str,
    extra: list[str] | None = None,
) -> list[str]:
    """Arguments of ``production_job.py`` running the v1 example agent on the stack."""
    return [
        "--agent-factory",
        "examples.review_agent.v1.agent:build_agent",
        "--bootstrap",
        _stack()["kafka_bootstrap"],
        "--source-topic",
        src,
        "--sink-topic",
        out,
        "--capture-topic",
        cap,
        "--action-state-topic",
        action_topic,
        "--job-identifier",
        namespace,
        "--agent-uid",
        uid,
        "--mem0-config",
        json.dumps(mem0_config(collection)),
        "--jars",
        ",".join(_stack()["connector_jars"]),
        "--group-id",
        f"grp-{run}",
        "--job-name",
        name,
        *(extra or []),
    ]
REPLAY_JOB = ROOT / "airflow_flink_replay" / "flink" / "replay_job.py"


def _cli_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.update(_stack().get("env", {}))
    env["FLINK_CONF_DIR"] = _stack()["flink_conf_dir"]
    env["JAVA_HOME"] = _stack()["java_home"]
    env["PATH"] = str(Path(_stack()["flink_python"]).parent) + os.pathsep + env.get("PATH", "")
    return env


def submit_async(
    script: Path,
    args: list[str],
    savepoint: str | None = None,
    allow_non_restored: bool = False,
    *,
    pythonpath: list[str] | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """Start ``flink run -d -py`` (a client JVM of its own); returns the Popen. See :func:`job_id_of`.

    The CLI, unlike the REST PythonDriver, does not share the JobManager's single Python gateway with the other
    helpers' submissions (a REST Python submission fails while another one runs, and a failed one can leave the
    gateway taken until the JobManager restarts). ``pythonpath`` is put in front of the job program's
    PYTHONPATH (e.g. where an agent package lives); ``conf`` becomes ``-D key=value`` options of the job.
    """
    import os
    import subprocess

    env = _cli_env()
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    cmd = [str(Path(_stack()["flink_home"]) / "bin" / "flink"), "run", "-d"]
    for key, value in (conf or {}).items():
        cmd.append(f"-D{key}={value}")
    if savepoint:
        cmd += ["-s", savepoint]
        if allow_non_restored:
            cmd.append("-n")
    cmd += ["-py", str(script), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def job_id_of(proc: Any, timeout: float = 240) -> str:
    import re

    out, _ = proc.communicate(timeout=timeout)
    m = re.search(r"JobID ([0-9a-f]{32})", out or "")
    if proc.returncode != 0 or not m:
        causes = "\n".join(line for line in (out or "").splitlines() if "Caused by" in line or "Exception:" in line)
        raise AssertionError(f"flink run failed ({proc.returncode}): causes:\n{causes[-4000:]}\n{(out or '')[-3000:]}")
    return m.group(1)


def submit(script: Path, args: list[str], savepoint: str | None = None, allow_non_restored: bool = False) -> str:
    """Submit a PyFlink program with the Flink CLI (detached); returns the job id."""
    return job_id_of(submit_async(script, args, savepoint, allow_non_restored))


def job_state(job_id: str) -> str:
    return requests.get(f"{_rest()}/jobs/{job_id}", timeout=30).json()["state"]


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
        info = requests.get(f"{_rest()}/jobs/{job_id}", timeout=30).json()
        if info["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in info["vertices"]):
            return
        if info["state"] in {"FAILED", "CANCELED", "FINISHED"}:
            raise AssertionError(f"job {job_id} is {info['state']}: {exceptions(job_id)[:3000]}")
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not running after {timeout}s")


def exceptions(job_id: str) -> str:
    try:
        d = requests.get(f"{_rest()}/jobs/{job_id}/exceptions", timeout=30).json()
    except Exception as exc:  # pragma: no cover - diagnostics only
        return str(exc)
    return "\n".join(e.get("stacktrace", "")[:1500] for e in d.get("exceptionHistory", {}).get("entries", [])[:3])


def exception_history(job_id: str) -> str:
    """Every entry of the job's exception history (name + full stack trace), as one text."""
    d = requests.get(f"{_rest()}/jobs/{job_id}/exceptions", timeout=30).json()
    entries = d.get("exceptionHistory", {}).get("entries", [])
    return "\n".join(f"{e.get('exceptionName', '')}\n{e.get('stacktrace', '')}" for e in entries)


def job_info(job_id: str) -> dict[str, Any]:
    """GET /jobs/{id}: state, start-time, end-time, vertices."""
    return requests.get(f"{_rest()}/jobs/{job_id}", timeout=30).json()


def taskmanager_ids(job_id: str) -> set[str]:
    """The TaskManagers the job's subtasks ran on (all vertices)."""
    ids = set()
    for v in job_info(job_id)["vertices"]:
        d = requests.get(f"{_rest()}/jobs/{job_id}/vertices/{v['id']}/taskmanagers", timeout=30).json()
        ids |= {tm["taskmanager-id"] for tm in d.get("taskmanagers", []) if tm.get("taskmanager-id")}
    return ids


def savepoint_dir(run: str) -> str:
    """A savepoint folder of the test run ``run`` under the stack's savepoint dir (remove it with
    :func:`remove_savepoint_dir`: a kept stack must not collect savepoints)."""
    return f"{_stack()['savepoint_dir']}/fside-{run}"


def remove_savepoint_dir(run: str) -> None:
    import shutil

    shutil.rmtree(savepoint_dir(run), ignore_errors=True)


def stop_with_savepoint(job_id: str, target: str, drain: bool = False, timeout: float = 120) -> str:
    r = requests.post(f"{_rest()}/jobs/{job_id}/stop", json={"targetDirectory": target, "drain": drain}, timeout=30)
    r.raise_for_status()
    trigger = r.json()["request-id"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = requests.get(f"{_rest()}/jobs/{job_id}/savepoints/{trigger}", timeout=30).json()
        if st["status"]["id"] == "COMPLETED":
            op = st["operation"]
            if "failure-cause" in op:
                raise AssertionError(f"savepoint failed: {json.dumps(op['failure-cause'])[:2000]}")
            return op["location"]
        time.sleep(0.3)
    raise AssertionError(f"savepoint of {job_id} not done after {timeout}s")


def cancel(job_id: str, timeout: float = 90) -> None:
    """Cancel the job and wait until it has ended: a job still CANCELLING holds its task slots, and the next
    module's jobs would find none (a cancel took 30 s under load in a clean-clone run: NoResourceAvailable)."""
    ended = {"FINISHED", "FAILED", "CANCELED"}
    try:
        if job_state(job_id) not in ended:
            requests.patch(f"{_rest()}/jobs/{job_id}?mode=cancel", timeout=30)
            wait_state(job_id, ended, timeout=timeout)
    except Exception:  # pragma: no cover - best-effort cleanup
        pass


def agent_vertex_id(job_id: str) -> str:
    """The plan vertex id of the vertex containing the agent operator."""
    plan = requests.get(f"{_rest()}/jobs/{job_id}/plan", timeout=30).json()["plan"]
    for node in plan["nodes"]:
        if "action-execute-operator" in node.get("description", ""):
            return node["id"]
    raise AssertionError("no action-execute-operator vertex in the plan")


# ------------------------------------------------------------------------------------------------ kafka
def create_topics(*specs: tuple[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": _stack()["kafka_bootstrap"]})
    for f in admin.create_topics([NewTopic(t, p, 1) for t, p in specs]).values():
        f.result()


def delete_topics(*topics: str) -> None:
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient({"bootstrap.servers": _stack()["kafka_bootstrap"]})
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

    c = Consumer(
        {
            "bootstrap.servers": _stack()["kafka_bootstrap"],
            "group.id": f"afr-test-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
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

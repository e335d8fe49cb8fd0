"""The raw procedure a person would run by hand to stop production and bring it back: the floor the replay run's
stop window is measured against (``flink-replay demo`` prints both; ``benchmarks/downtime.py`` and
``benchmarks/control_plane.py`` alternate them).

Plain Flink REST calls, none of this package's operators: ``POST /jobs/{id}/stop {"drain": true}``, poll the
savepoint, ``POST /jars/{id}/run`` from it with production's program, poll until every vertex RUNS. Downtime = the
stop request → the last subtask RUNNING by Flink's own timestamps (a poll of ``/jobs/{id}`` sees it up to the REST
cache's ``web.refresh-interval`` late; the stop window ends its downtime the same way).
"""

from __future__ import annotations

import time

import requests

__all__ = ["flink_running_at", "raw_drain_and_restore", "wait_all_running"]


def wait_all_running(base: str, job_id: str, poll: float, timeout: float = 180) -> float:
    """Poll until every vertex of the job runs; returns the epoch time it was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = requests.get(f"{base}/jobs/{job_id}", timeout=30).json()
        if job["state"] == "RUNNING" and job["vertices"] and all(v["status"] == "RUNNING" for v in job["vertices"]):
            return time.time()
        if job["state"] in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(f"job {job_id} ended {job['state']}")
        time.sleep(poll)
    raise TimeoutError(f"job {job_id} not RUNNING after {timeout} s")


def flink_running_at(base: str, job_id: str) -> float | None:
    """When the job's last subtask started RUNNING by Flink's own timestamps (epoch seconds)."""
    latest = 0
    for vertex in requests.get(f"{base}/jobs/{job_id}", timeout=30).json()["vertices"]:
        times = requests.get(f"{base}/jobs/{job_id}/vertices/{vertex['id']}/subtasktimes", timeout=30).json()
        for subtask in times.get("subtasks") or []:
            latest = max(latest, int((subtask.get("timestamps") or {}).get("RUNNING") or 0))
    return latest / 1000 if latest else None


def raw_drain_and_restore(
    base: str, job_id: str, jar_id: str, driver_args: list[str], target: str, poll: float = 0.1
) -> tuple[float, str]:
    """Stop ``job_id`` with drain into ``target`` and run ``jar_id`` (the PythonDriver jar) with ``driver_args``
    from the savepoint, by hand; returns ``(downtime seconds, the new job's id)``."""
    stop_at = time.time()
    trigger = requests.post(
        f"{base}/jobs/{job_id}/stop", json={"targetDirectory": target, "drain": True}, timeout=30
    ).json()["request-id"]
    while True:
        status = requests.get(f"{base}/jobs/{job_id}/savepoints/{trigger}", timeout=30).json()
        if status["status"]["id"] == "COMPLETED":
            operation = status["operation"]
            if "location" not in operation:
                raise RuntimeError(f"stop with savepoint of {job_id} failed: {operation.get('failure-cause')}")
            location = operation["location"]
            break
        time.sleep(poll)
    body = {"entryClass": "org.apache.flink.client.python.PythonDriver", "programArgsList": driver_args,
            "savepointPath": location, "allowNonRestoredState": False}  # fmt: skip
    for _ in range(10):
        response = requests.post(f"{base}/jars/{jar_id}/run", json=body, timeout=180)
        if response.status_code != 400 or "setGatewayServer" not in response.text:
            break
        time.sleep(1.0)  # another PythonDriver run holds the JobManager's gateway: retry, as by hand
    if response.status_code != 200:
        raise RuntimeError(f"run jar failed: {response.text[:2000]}")
    new_id = response.json()["jobid"]
    seen = wait_all_running(base, new_id, poll)
    ran = flink_running_at(base, new_id)
    return (ran if ran is not None and ran <= seen else seen) - stop_at, new_id

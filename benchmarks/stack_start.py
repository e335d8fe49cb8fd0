"""Time `stack up` cold and warm, and the RSS of each stack process with a job running.

Cold = a new work folder whose processes all start (the Flink-side venv and downloads come from the
cache, as on every run after the first; pass --from-scratch to include creating the venv, ~2-4 min).
Warm = `up` again while the stack is up (the idempotent path). Runs on its own ports and stops what it
started. Usage: .venv/bin/python benchmarks/stack_start.py [--from-scratch]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_flink_replay.local.stack import LocalStack, StackConfig, _descendants  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    total = 0
    for p in (pid, *_descendants(pid)):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--from-scratch", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="afr-bench-stack-"))
    cache = work / "cache" if args.from_scratch else ROOT / ".stack"
    config = StackConfig(workdir=work / "stack", cache_dir=cache, flink_rest_port=_free_port(),
                         flink_rpc_port=_free_port(), kafka_port=_free_port(), chroma_port=_free_port())
    stack = LocalStack(config)
    t0 = time.monotonic()
    info = stack.up()
    cold = time.monotonic() - t0
    try:
        t0 = time.monotonic()
        stack.up()
        warm = time.monotonic() - t0

        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": info.kafka_bootstrap})
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in (topic, topic + "-out")]).values():
            f.result(10)
        producer = Producer({"bootstrap.servers": info.kafka_bootstrap, "linger.ms": 0})
        for i in range(50):
            producer.produce(topic, value=f"k{i % 5},{i}".encode())
            producer.flush(5)
        env = {**os.environ, "FLINK_CONF_DIR": info.flink_conf_dir, "JAVA_HOME": info.java_home}
        run = subprocess.run(
            [f"{info.flink_home}/bin/flink", "run", "-d", "-py", str(ROOT / "tests/jobs/smoke_keyed_counter.py"),
             "--bootstrap", info.kafka_bootstrap, "--source", topic, "--sink", topic + "-out",
             "--jars", ",".join(info.connector_jars), "--unbounded"],
            capture_output=True, text=True, env=env, check=True,
        )
        job_id = re.search(r"JobID ([0-9a-f]{32})", run.stdout).group(1)  # type: ignore[union-attr]
        while requests.get(f"{info.flink_rest_url}/jobs/{job_id}", timeout=5).json()["state"] != "RUNNING":
            time.sleep(1)
        time.sleep(5)  # let the Python workers come up
        print(f"stack up cold{' (incl. venv)' if args.from_scratch else ' (cached venv)'}: {cold:6.1f} s")
        print(f"stack up warm (already up):      {warm:6.2f} s")
        print("RSS with one PyFlink job running (process + its children):")
        total = 0.0
        for proc in info.processes:
            mb = _rss_mb(proc.pid)
            total += mb
            print(f"  {proc.name:<18} {mb:8.1f} MB")
        print(f"  {'total':<18} {total:8.1f} MB  (budget 4096 MB)")
        requests.patch(f"{info.flink_rest_url}/jobs/{job_id}?mode=cancel", timeout=5)
        del producer, admin  # close the clients before their broker goes away
    finally:
        stack.down()


if __name__ == "__main__":
    main()

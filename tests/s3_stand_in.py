"""A stand-in for Amazon S3 that runs here: moto's server mode (``moto_server``, an S3 API on a loopback port).

It is a fake of a hosted service, named as such: the tests that use it check what crosses the S3 API (objects
written by Airflow's object storage through an ``aws`` connection, conditional writes for the production lease),
not S3 itself. Airflow reaches it through an ``aws`` connection given by environment variable
(``AIRFLOW_CONN_<ID>``), the way a deployment gives its connections; the credentials are moto's dummy ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from airflow_flink_replay.local.airflow_server import free_port

#: moto accepts any credentials: these name no real account
_DUMMY_KEY, _DUMMY_SECRET, _REGION = "stand-in", "stand-in", "us-east-1"


@dataclass(frozen=True)
class S3StandIn:
    """A running moto server with one bucket; ``conn_id`` is the Airflow connection that reaches it."""

    endpoint: str
    bucket: str
    conn_id: str

    def uri(self, prefix: str) -> str:
        """``s3://<conn_id>@<bucket>/<prefix>``: an ``ObjectStoragePath`` URI naming its connection."""
        return f"s3://{self.conn_id}@{self.bucket}/{prefix.strip('/')}"

    def connection_env(self) -> dict[str, str]:
        """The environment that gives Airflow the connection (``AIRFLOW_CONN_<ID>``, JSON)."""
        conn = {"conn_type": "aws", "login": _DUMMY_KEY, "password": _DUMMY_SECRET,
                "extra": {"endpoint_url": self.endpoint, "region_name": _REGION}}
        return {f"AIRFLOW_CONN_{self.conn_id.upper()}": json.dumps(conn)}

    def client(self) -> Any:
        """A boto3 S3 client of the stand-in (the test's own view of the bucket)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=_DUMMY_KEY,
                            aws_secret_access_key=_DUMMY_SECRET, region_name=_REGION)

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key of the bucket under ``prefix``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    def get(self, key: str) -> bytes:
        """One object's bytes."""
        return bytes(self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read())


@contextmanager
def s3_stand_in(log_path: Path, *, bucket: str = "replay-runs", conn_id: str = "afr_s3") -> Iterator[S3StandIn]:
    """Start ``moto_server`` on a free loopback port with ``bucket`` created; stopped on exit."""
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as out:
        proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{endpoint}/moto-api/", timeout=2).status_code < 500:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not answer on {endpoint}: {log_path.read_text()[-2000:]}")
            time.sleep(0.3)
        stand_in = S3StandIn(endpoint, bucket, conn_id)
        stand_in.client().create_bucket(Bucket=bucket)
        yield stand_in
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

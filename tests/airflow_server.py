"""A real Airflow for the tests: ``airflow standalone`` (api-server, scheduler with the LocalExecutor,
DAG processor, triggerer) in its own AIRFLOW_HOME, driven over the public REST API the way CI drives the
release gate — not ``dag.test()``, which runs one task at a time in the test process."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
TERMINAL_RUN_STATES = ("success", "failed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AirflowStandalone:
    """``airflow standalone`` on a free loopback port, with the stack's connections and a replay spec.

    :param home: the AIRFLOW_HOME (a fresh folder: its own sqlite metadata DB).
    :param connections_file: the stack's ``connections.json`` (exported as ``AIRFLOW_CONN_*``).
    :param spec_path: the ReplaySpec the DAG files load (``FLINK_REPLAY_SPEC``).
    :param deferrable: ``[operators] default_deferrable`` — waits happen in the triggerer.
    """

    def __init__(self, home: Path, connections_file: str, spec_path: Path, *, deferrable: bool = True) -> None:
        self.home = home
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = home / "standalone.log"
        self._token: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        venv_bin = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",  # standalone starts its parts as `airflow ...`
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": str(deferrable),
            # the DAG files do not change while a test runs: parse them at start, not every 30 s (each parse
            # imports the provider; on 2 cores that is CPU the replays need)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "FLINK_REPLAY_SPEC": str(spec_path),
        }
        self.env.pop("AIRFLOW__CORE__SQL_ALCHEMY_CONN", None)
        for conn_id, conn in json.loads(Path(connections_file).read_text()).items():
            self.env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 240.0) -> AirflowStandalone:
        """Start it and wait until the scheduler, triggerer and DAG processor report healthy."""
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> None:
        """Start it without waiting (:meth:`wait_healthy` waits)."""
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "airflow", "standalone"], env=self.env, cwd=self.home,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def wait_healthy(self, timeout: float = 240.0) -> AirflowStandalone:
        """Wait until the scheduler, triggerer and DAG processor report healthy."""
        assert self._proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while True:
            health = self._health()
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            if health and all((health.get(p) or {}).get("status") == "healthy" for p in parts):
                return self
            if self._proc.poll() is not None:
                raise RuntimeError(f"airflow standalone exited with {self._proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"airflow standalone not healthy within {timeout:.0f}s ({health}):\n{self.tail()}")
            time.sleep(2)

    def stop(self) -> None:
        """Stop every process of the standalone (its process group)."""
        if self._proc is None or self._proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self._proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def _health(self) -> dict[str, Any] | None:
        try:
            r = requests.get(f"{self.base}/api/v2/monitor/health", timeout=3)
            return r.json() if r.ok else None
        except (requests.RequestException, ValueError):
            return None

    # ------------------------------------------------------------------------------------- REST API
    def api(self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """One call to the public REST API (``/api/v2``) with a bearer token from ``/auth/token``.

        The api-server shares a sqlite DB with the scheduler: on a loaded machine an answer can take long.
        Every call here is safe to send again (reads, the unpause, a trigger with its own run id), so a
        timeout is retried; statuses in ``ok`` count as success (409: the retried trigger had created it).
        """
        if self._token is None:
            self._token = self._send("GET", f"{self.base}/auth/token").json()["access_token"]
        r = self._send(method, f"{self.base}/api/v2{path}", headers={"Authorization": f"Bearer {self._token}"},
                       **kwargs)
        if not r.ok and r.status_code not in ok:
            raise RuntimeError(f"{method} /api/v2{path} -> HTTP {r.status_code}: {r.text[:1000]}")
        return r.json() if r.content and r.ok else None

    @staticmethod
    def _send(method: str, url: str, **kwargs: Any) -> requests.Response:
        for attempt in range(5):
            try:
                return requests.request(method, url, timeout=60, **kwargs)
            except (requests.ConnectionError, requests.Timeout):
                if attempt == 4:
                    raise
                time.sleep(5)
        raise AssertionError("unreachable")

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> None:
        """Wait until the DAG processor has parsed ``dag_id``; then unpause it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api("GET", f"/dags/{dag_id}")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    errors = self.api("GET", "/importErrors")
                    raise RuntimeError(f"{dag_id} not parsed within {timeout:.0f}s; import errors: {errors}") from None
                time.sleep(2)
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """``POST /dags/{dag_id}/dagRuns`` — what CI does — with a run id of our own (a resent trigger
        cannot start a second run); returns the run id."""
        run_id = f"ci__{time.strftime('%Y%m%dT%H%M%S')}_{secrets.token_hex(4)}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
        self.api("POST", f"/dags/{dag_id}/dagRuns", json=body, ok=(409,))
        return run_id

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Wait until the run ends; returns its state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in TERMINAL_RUN_STATES:
                return str(state)
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id} still {state} after {timeout:.0f}s; states: "
                                   f"{self.task_states(dag_id, run_id)}\n{self.tail()}")
            time.sleep(3)

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's task instances by task id."""
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        return {ti["task_id"]: ti for ti in tis["task_instances"]}

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {task: str(ti["state"]) for task, ti in self.task_instances(dag_id, run_id).items()}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """One XCom value, deserialized."""
        entry = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                         params={"deserialize": "true", "stringify": "false"})
        return entry["value"]

"""``airflow standalone`` on the local stack, driven over Airflow's public REST API.

What the demo runs its release gates on, and what the tests drive: the api-server, the scheduler with the
LocalExecutor (tasks in parallel, each in a process of its own), the DAG processor and the triggerer
(operators deferrable), in an Airflow home of their own. A gate run is triggered the way CI triggers it,
``POST /api/v2/dags/{dag_id}/dagRuns``, never ``dag.test()`` (one task at a time in one process).

The environment comes from :func:`airflow_flink_replay.local.airflow_runner.airflow_env` (the stack's
connections, the spec, the venv's ``bin`` first on ``PATH``: standalone starts its parts as ``airflow ...``
found by name).
"""

from __future__ import annotations

import contextlib
import functools
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
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

TERMINAL_RUN_STATES = ("success", "failed")
#: Airflow's option naming the simple auth manager's users (``name:role,...``); set, the standalone asks for a login
USERS_OPTION = "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"
_HEALTHY_PARTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_alive(pgid: int) -> bool:
    """Whether a process of the process group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def shared_env(env: dict[str, str], port: int, *, deferrable: bool = True) -> dict[str, str]:
    """``env`` (an :func:`airflow_env`) with what every Airflow part talking to the api-server on ``port`` needs,
    whatever its executor and metadata DB (:func:`server_env` adds the standalone's, :mod:`.celery_airflow` the
    Celery ones): the execution API on that port, deferrable operators, DAG files parsed at start rather than
    every 30 s (each parse imports the provider: CPU the replays need on a small machine), and a scheduler that
    looks again after 0.2 s instead of 1 s when a loop found nothing to do (a gate run is ~28 tasks mostly one
    after another: each waited up to a second for the next loop to see its predecessor finished).

    With :data:`USERS_OPTION` in ``env`` (``reviewer:admin,outsider:viewer``) the UI and the REST API ask for a
    login as one of those users (Airflow writes their passwords to :func:`passwords_file`); without it every
    request is an admin's (``simple_auth_manager_all_admins``: no login)."""
    return {
        **env,
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": str(not env.get(USERS_OPTION)),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API_AUTH__JWT_SECRET": env.get("AIRFLOW__API_AUTH__JWT_SECRET") or secrets.token_hex(16),
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": str(deferrable),
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
    }


def server_env(env: dict[str, str], port: int, *, deferrable: bool = True) -> dict[str, str]:
    """:func:`shared_env` for a standalone on ``port``: the LocalExecutor (tasks in parallel, each in a process of
    its own) on the home's own sqlite DB (a SQL connection ``env`` names is dropped)."""
    server = {**shared_env(env, port, deferrable=deferrable), "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}
    server.pop("AIRFLOW__CORE__SQL_ALCHEMY_CONN", None)
    return server


def users(env: dict[str, str]) -> list[tuple[str, str]]:
    """The ``(name, role)`` of the users ``env`` names (:data:`USERS_OPTION`); empty: no login (all admins)."""
    found = []
    for entry in (env.get(USERS_OPTION) or "").split(","):
        name, _, role = entry.strip().partition(":")
        if name:
            found.append((name, role.partition(":")[0]))
    return found


def passwords_file(env: dict[str, str]) -> Path:
    """Where Airflow's simple auth manager writes the users' generated passwords (JSON: name to password)."""
    configured = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
    default = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    return Path(configured) if configured else default


class AirflowServer:
    """``airflow standalone`` in ``env``'s Airflow home on ``port``; its output goes to ``log_path``.

    :param env: the Airflow environment (:func:`airflow_env`); :func:`server_env` is applied to it.
    :param port: the api-server's port (the UI and the REST API).
    :param log_path: where standalone's own output goes.
    :param run_id_prefix: the prefix of the run ids :meth:`trigger` gives (``demo``, ``ci``, ...).
    """

    def __init__(self, env: dict[str, str], port: int, log_path: Path, *, deferrable: bool = True,
                 run_id_prefix: str = "api") -> None:
        self.env = server_env(env, port, deferrable=deferrable)
        self.home = Path(self.env["AIRFLOW_HOME"])
        self.port, self.base, self.log = port, f"http://127.0.0.1:{port}", log_path
        self.run_id_prefix = run_id_prefix
        self._token: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------------------------ lifecycle
    def launch(self) -> None:
        """Start it in its own process group without waiting (:meth:`wait_healthy` waits)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "airflow", "standalone"], env=self.env, cwd=self.home,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def wait_healthy(self, timeout: float = 240.0) -> AirflowServer:
        """Wait until the scheduler, triggerer and DAG processor report healthy; a standalone that exits or
        stays unhealthy fails with the tail of its output."""
        assert self._proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while True:
            health = self.health()
            if health and all((health.get(p) or {}).get("status") == "healthy" for p in _HEALTHY_PARTS):
                return self
            if self._proc.poll() is not None:
                raise RuntimeError(f"airflow standalone exited with {self._proc.returncode} (log: {self.log}):\n"
                                   f"{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"airflow standalone not healthy within {timeout:.0f}s ({health}); log: "
                                   f"{self.log}\n{self.tail()}")
            time.sleep(2)

    def wait(self) -> int:
        """Wait until it exits (a person stops it with Ctrl-C); returns its exit code."""
        assert self._proc is not None, "launch() first"
        try:
            return self._proc.wait()
        except KeyboardInterrupt:
            self.stop()
            return 0

    def stop(self) -> None:
        """Stop every process of the standalone: its process group gets SIGTERM, and SIGKILL for whatever is
        left once standalone itself has exited or 30 s have passed (its scheduler and LocalExecutor workers
        can outlive it)."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(self._proc.pid):
            time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(10)

    def tail(self, chars: int = 4000) -> str:
        """The end of standalone's output."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def health(self) -> dict[str, Any] | None:
        """``/api/v2/monitor/health``, None while it does not answer."""
        try:
            r = requests.get(f"{self.base}/api/v2/monitor/health", timeout=3)
            return r.json() if r.ok else None
        except (requests.RequestException, ValueError):
            return None

    # ------------------------------------------------------------------------------------- REST API
    def api(self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """One call to the public REST API (``/api/v2``) with a bearer token from ``/auth/token``.

        The api-server shares a sqlite DB with the scheduler: on a loaded machine an answer can take long.
        Every call made here is safe to send again (reads, the unpause, a trigger with its own run id), so a
        timeout is retried; statuses in ``ok`` count as success (409: a resent trigger had created the run).
        """
        if self._token is None:
            self._token = self.token()
        r = self._send(method, f"{self.base}/api/v2{path}", headers={"Authorization": f"Bearer {self._token}"},
                       **kwargs)
        if not r.ok and r.status_code not in ok:
            raise RuntimeError(f"{method} /api/v2{path} -> HTTP {r.status_code}: {r.text[:1000]}")
        return r.json() if r.content and r.ok else None

    def token(self, username: str | None = None) -> str:
        """A JWT of the REST API: the user ``username``'s (its generated password from :func:`passwords_file`),
        by default the first admin's; with no users configured, an admin's (``GET /auth/token``)."""
        named = users(self.env)
        if not named:
            method, body = "GET", None
        else:
            if username is None:
                username = next((n for n, role in named if role.lower() == "admin"), named[0][0])
            method, body = "POST", {"username": username, "password": self.password(username)}
        r = self._send(method, f"{self.base}/auth/token", json=body)
        if not r.ok:
            raise RuntimeError(f"{method} /auth/token as {username or 'admin'} -> HTTP {r.status_code}: {r.text[:300]}")
        return str(r.json()["access_token"])

    def password(self, username: str) -> str:
        """The generated password of ``username`` (one of the configured users)."""
        return str(json.loads(passwords_file(self.env).read_text())[username])

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        return self._session.request(method, url, timeout=60, **kwargs)

    @functools.cached_property
    def _session(self) -> requests.Session:
        """A session that resends a request after a connection error or a read timeout, four times, waiting
        0, 5, 10 and 20 s (the api-server shares a sqlite DB with the scheduler: on a loaded machine it can
        be slow to answer)."""
        retry = Retry(total=4, connect=4, read=4, status=0, other=0, backoff_factor=2.5, allowed_methods=None,
                      raise_on_status=False)
        session = requests.Session()
        session.mount("http://", HTTPAdapter(max_retries=retry))
        return session

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
        run_id = f"{self.run_id_prefix}__{time.strftime('%Y%m%dT%H%M%S')}_{secrets.token_hex(4)}"
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
        """The run's task states by task id."""
        return {task: str(ti["state"]) for task, ti in self.task_instances(dag_id, run_id).items()}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """One XCom value, deserialized."""
        entry = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                         params={"deserialize": "true", "stringify": "false"})
        return entry["value"]

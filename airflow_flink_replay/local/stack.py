"""The embedded local stack: two Flink session clusters (production's and the replays'), the tansu broker and a
Chroma server for Mem0.

``up`` does every set-up step it needs on a fresh machine and is idempotent: a stack that is already up is
reported, not started twice. ``down`` stops exactly the processes ``up`` started, by pid. Everything lives
in one work folder (``.stack/`` by default); ``stack.json`` there records every address, path and pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import requests
import yaml
from pydantic import BaseModel, Field, ValidationError

from airflow_flink_replay.exceptions import StackSetupError
from airflow_flink_replay.local.components import (
    ensure_connector_jars,
    ensure_flink_venv,
    ensure_tansu,
    find_java_home,
    venv_site_packages,
)

STACK_FILE = "stack.json"
CONNECTIONS_FILE = "connections.json"
ENV_FILE = "stack.env"
#: Stack folders whose lock this process holds, with the depth (``LocalStack._changing`` is re-entrant).
_HELD: dict[str, int] = {}
#: The Airflow connection of the stack's replay cluster.
REPLAY_CONN_ID = "flink_replay"
#: A JobManager's cached metaspace reading may be behind by every submission since the last read: one this
#: far above the recycling line needs no fresh read (a test module makes fewer than ~20 submissions, ~14 MB each).
_STALE_READING_MARGIN_MB = 300.0
#: The collection Flink Agents' Mem0 long-term memory uses by default.
MEM0_COLLECTION = "flink_agents_mem0_ltm"


def default_workdir() -> Path:
    """``$FLINK_REPLAY_STACK_DIR`` or ``./.stack``."""
    return Path(os.environ.get("FLINK_REPLAY_STACK_DIR", ".stack")).resolve()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise StackSetupError(f"{name}={value!r} is not a port number; set it to an integer or unset it") from None


class StackConfig(BaseModel):
    """Where the stack lives and which loopback ports it takes.

    Every default can be overridden from the environment: ``FLINK_REPLAY_STACK_DIR``,
    ``FLINK_REPLAY_CACHE_DIR``, ``FLINK_REPLAY_FLINK_REST_PORT``, ``FLINK_REPLAY_FLINK_RPC_PORT``,
    ``FLINK_REPLAY_KAFKA_PORT``, ``FLINK_REPLAY_CHROMA_PORT``.
    """

    workdir: Path = Field(default_factory=default_workdir)
    #: Where the Flink-side venv, downloads and extracted binaries are cached (default: the workdir).
    #: Several stacks (other ports, other workdirs) can share one cache.
    cache_dir: Path | None = Field(
        default_factory=lambda: Path(p) if (p := os.environ.get("FLINK_REPLAY_CACHE_DIR")) else None
    )
    flink_rest_port: int = Field(default_factory=lambda: _env_int("FLINK_REPLAY_FLINK_REST_PORT", 8081))
    flink_rpc_port: int = Field(default_factory=lambda: _env_int("FLINK_REPLAY_FLINK_RPC_PORT", 6123))
    kafka_port: int = Field(default_factory=lambda: _env_int("FLINK_REPLAY_KAFKA_PORT", 9092))
    chroma_port: int = Field(default_factory=lambda: _env_int("FLINK_REPLAY_CHROMA_PORT", 8000))
    #: A second Flink session cluster for replay jobs (``flink_replay`` connection), so a replay can never
    #: take production's JobManager or TaskManager down. ``FLINK_REPLAY_REPLAY_CLUSTER=0`` turns it off.
    replay_cluster: bool = Field(default_factory=lambda: os.environ.get("FLINK_REPLAY_REPLAY_CLUSTER", "1") != "0")
    replay_rest_port: int = Field(default_factory=lambda: _env_int("FLINK_REPLAY_REPLAY_REST_PORT", 8082))
    replay_rpc_port: int = Field(default_factory=lambda: _env_int("FLINK_REPLAY_REPLAY_RPC_PORT", 6124))
    task_slots: int = 4
    #: Every PythonDriver run (submission or plan of a Python job) loads the job's classes into the
    #: JobManager's metaspace; Flink's default 256m died after ~47 runs here (benchmarks/jobmanager_soak.py).
    #: The metaspace comes out of the process size: 2112m keeps ~700m of heap next to 1024m of metaspace
    #: (~55 submissions between recycles; 512m meant a recycle, and a cold first job, every ~18).
    jobmanager_memory: str = "2112m"
    jobmanager_metaspace: str = "1024m"
    taskmanager_memory: str = "2400m"
    #: Extra JVM options of the stack's JobManagers and TaskManagers, after Flink's own
    #: (``FLINK_REPLAY_JVM_OPTIONS``; none by default). Measured here: the client-level JIT only
    #: (``-XX:TieredStopAtLevel=1``) cut the four JVMs' CPU over the release-gate module from 144 to 93 s, yet
    #: the whole test suite took 2,394 s with it against 2,130 s without (docs/local-stack.md).
    jvm_options: str = Field(default_factory=lambda: os.environ.get("FLINK_REPLAY_JVM_OPTIONS", ""))
    start_timeout: float = 120.0

    def clusters(self) -> list[ClusterLayout]:
        """The Flink clusters this stack runs: production's, then the replay cluster when enabled."""
        out = [ClusterLayout(name="production", rest_port=self.flink_rest_port, rpc_port=self.flink_rpc_port)]
        if self.replay_cluster:
            out.append(ClusterLayout(name="replay", rest_port=self.replay_rest_port, rpc_port=self.replay_rpc_port,
                                     subdir="replay-cluster"))
        return out


class ClusterLayout(BaseModel):
    """One Flink session cluster of the stack: its ports and where its files live below the workdir."""

    name: str
    rest_port: int
    rpc_port: int
    #: below the workdir; "" = the workdir itself (production's cluster, where earlier stacks kept it)
    subdir: str = ""

    @property
    def prefix(self) -> str:
        """Process name prefix: ``flink`` (production) or ``replay``."""
        return "flink" if self.name == "production" else self.name

    @property
    def rest_url(self) -> str:
        """The cluster's REST base URL."""
        return f"http://127.0.0.1:{self.rest_port}"


class ProcessInfo(BaseModel):
    """One process the stack started."""

    name: str
    pid: int
    log: str


class StackInfo(BaseModel):
    """What ``stack.json`` records: addresses, paths, pids and the environment the sides need."""

    workdir: str
    flink_home: str
    flink_conf_dir: str
    flink_python: str
    flink_rest_url: str
    kafka_bootstrap: str
    chroma_host: str
    chroma_port: int
    mem0_dir: str
    connector_jars: list[str]
    savepoint_dir: str
    checkpoint_dir: str
    java_home: str
    processes: list[ProcessInfo]
    env: dict[str, str]
    connections_file: str
    #: The replay cluster (None when the stack runs only production's).
    replay_flink_rest_url: str | None = None
    replay_flink_conf_dir: str | None = None
    #: The distributed Airflow started beside the stack (``stack up --airflow celery``): its UI, its parts
    #: (each the leader of a session of its own) and PostgreSQL's data folder (stopped with ``pg_ctl``).
    airflow_url: str | None = None
    airflow_processes: list[ProcessInfo] = Field(default_factory=list)
    airflow_postgres_dir: str | None = None

    def rest_url(self, cluster: str = "production") -> str:
        """The REST URL of ``cluster`` (``production`` or ``replay``)."""
        if cluster == "production":
            return self.flink_rest_url
        if cluster == "replay" and self.replay_flink_rest_url:
            return self.replay_flink_rest_url
        raise StackSetupError(f"this stack runs no {cluster!r} Flink cluster (start it with the replay cluster on)")

    def mem0_config(self, collection: str = MEM0_COLLECTION) -> dict[str, Any]:
        """A mem0 config for the stack's Chroma server (embedder/LLM chosen by the caller)."""
        return {
            "vector_store": {
                "provider": "chroma",
                "config": {
                    "host": self.chroma_host,
                    "port": self.chroma_port,
                    "collection_name": collection,
                },
            },
            "history_db_path": str(Path(self.mem0_dir) / "history.db"),
        }


def offline_env(mem0_dir: Path) -> dict[str, str]:
    """Environment that keeps mem0 / chroma / Hugging Face offline and out of the home folder."""
    return {
        "MEM0_TELEMETRY": "False",
        "MEM0_DIR": str(mem0_dir),
        "HF_HUB_OFFLINE": "1",
        "ANONYMIZED_TELEMETRY": "False",
    }


# --------------------------------------------------------------------------------------------- helpers


def port_free(port: int) -> bool:
    """Whether nothing listens on ``port`` of the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def _wait(check: Any, timeout: float, what: str, proc: ProcessInfo | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and not _pid_alive(proc.pid):
            raise StackSetupError(
                f"{proc.name} (pid {proc.pid}) died at start; last lines of {proc.log}:\n{_tail(Path(proc.log))}"
            )
        time.sleep(0.5)
    detail = f"; last lines of {proc.log}:\n{_tail(Path(proc.log))}" if proc else ""
    raise StackSetupError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


def _spawn(name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> ProcessInfo:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return ProcessInfo(name=name, pid=proc.pid, log=str(log))


# ------------------------------------------------------------------------------------------ readiness


def flink_taskmanagers(rest_url: str) -> int:
    """Number of TaskManagers registered at the JobManager (-1 when REST does not answer)."""
    try:
        r = requests.get(f"{rest_url}/overview", timeout=2)
        r.raise_for_status()
        return int(r.json().get("taskmanagers", 0))
    except (requests.RequestException, ValueError):
        return -1


def kafka_answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when the broker answers a metadata request."""
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout)
        return True
    except Exception:
        return False


def airflow_answers(url: str) -> bool:
    """True when Airflow's health endpoint reports its metadatabase, scheduler, triggerer and DAG processor
    healthy."""
    try:
        health = requests.get(f"{url}/api/v2/monitor/health", timeout=3).json()
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((health.get(p) or {}).get("status") == "healthy" for p in parts)
    except (requests.RequestException, ValueError, AttributeError):
        return False


def chroma_answers(host: str, port: int) -> bool:
    """True when the Chroma server's heartbeat answers."""
    try:
        return requests.get(f"http://{host}:{port}/api/v2/heartbeat", timeout=2).ok
    except requests.RequestException:
        return False


# ------------------------------------------------------------------------------------------- the stack


class _Prepared(NamedTuple):
    """What :meth:`LocalStack.up` set up before starting anything."""

    java_home: Path
    flink_python: Path
    flink_home: Path
    tansu: Path
    jars: list[Path]
    conf_dirs: dict[str, Path]
    mem0_dir: Path
    env: dict[str, str]


def _restart_strategy(cluster: str) -> dict[str, Any]:
    """How a cluster's jobs restart after a failure. Production: three attempts 2 s apart. A replay job: eight
    attempts backing off from 0.2 s, doubling to 3 s (about 15 s of waiting in all). Flink Agents' action-state store
    gives the broker 100 ms to list its topics when the agent operator starts; with a gate's three replays (or two
    runs' six) starting Python workers at once on two cores, three quick attempts were seen to fail in a row."""
    if cluster == "production":
        return {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3,
                "restart-strategy.fixed-delay.delay": "2 s"}
    prefix = "restart-strategy.exponential-delay"
    return {"restart-strategy.type": "exponential-delay", f"{prefix}.initial-backoff": "200 ms",
            f"{prefix}.max-backoff": "3 s", f"{prefix}.backoff-multiplier": 2.0, f"{prefix}.jitter-factor": 0.1,
            f"{prefix}.attempts-before-reset-backoff": 8, f"{prefix}.reset-backoff-threshold": "1 h"}


class LocalStack:
    """Set up, start, inspect and stop the embedded stack in one work folder."""

    def __init__(self, config: StackConfig | None = None) -> None:
        self.config = config or StackConfig()
        self.workdir = self.config.workdir.resolve()
        self.cache_dir = (self.config.cache_dir or self.workdir).resolve()

    # paths
    @property
    def stack_file(self) -> Path:
        """Path of ``stack.json``."""
        return self.workdir / STACK_FILE

    def _p(self, *parts: str) -> Path:
        return self.workdir.joinpath(*parts)

    def _cp(self, cluster: ClusterLayout, *parts: str) -> Path:
        """A path of ``cluster``'s own files (logs, pids, tmp, web, flink-conf)."""
        return self.workdir.joinpath(cluster.subdir, *parts) if cluster.subdir else self.workdir.joinpath(*parts)

    def _cluster(self, name: str) -> ClusterLayout:
        for cluster in self.config.clusters():
            if cluster.name == name:
                return cluster
        raise StackSetupError(f"this stack runs no {name!r} Flink cluster")

    # -- reading
    def info(self) -> StackInfo | None:
        """The recorded stack, or None when none was started here; a file that is not a stack record (cut short,
        edited, not ours) raises :class:`StackSetupError` naming it and the fix."""
        if not self.stack_file.exists():
            return None
        try:
            return StackInfo.model_validate_json(self.stack_file.read_bytes())
        except OSError as err:
            cause = str(err.strerror)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            cause = f"{'.'.join(map(str, first['loc'])) or 'the file'}: {first['msg']}"
        raise StackSetupError(
            f"{self.stack_file} is not a stack record ({' '.join(cause.split())[:200]}). Fix: stop what is left "
            f"of that stack (its Flink, tansu and Chroma processes under {self.workdir}), delete {self.stack_file}, "
            "then `flink-replay stack up`"
        )

    def status(self) -> dict[str, Any]:
        """What is up: per process alive/dead, Flink TaskManagers, Kafka metadata, Chroma heartbeat."""
        info = self.info()
        if info is None:
            return {"up": False, "reason": f"no {STACK_FILE} in {self.workdir}"}
        everything = info.processes + info.airflow_processes
        procs = {p.name: {"pid": p.pid, "alive": _pid_alive(p.pid)} for p in everything}
        tms = flink_taskmanagers(info.flink_rest_url)
        replay_tms = flink_taskmanagers(info.replay_flink_rest_url) if info.replay_flink_rest_url else 1
        kafka = kafka_answers(info.kafka_bootstrap)
        chroma = chroma_answers(info.chroma_host, info.chroma_port)
        up = all(p["alive"] for p in procs.values()) and tms >= 1 and replay_tms >= 1 and kafka and chroma
        airflow_up = airflow_answers(info.airflow_url) if info.airflow_url else True
        airflow = {"url": info.airflow_url, "answers": airflow_up} if info.airflow_url else None
        up = up and airflow_up
        replay = (
            {"rest_url": info.replay_flink_rest_url, "taskmanagers": max(replay_tms, 0), "answers": replay_tms >= 0}
            if info.replay_flink_rest_url
            else None
        )
        return {
            "up": up,
            "flink": {"rest_url": info.flink_rest_url, "taskmanagers": max(tms, 0), "answers": tms >= 0},
            "replay_flink": replay,
            "kafka": {"bootstrap": info.kafka_bootstrap, "answers": kafka},
            "mem0": {"chroma": f"http://{info.chroma_host}:{info.chroma_port}", "answers": chroma},
            "processes": procs,
            "airflow": airflow,
            "stack_file": str(self.stack_file),
        }

    # -- starting
    def up(self) -> StackInfo:
        """Set up whatever is missing and start the stack; return the recorded info.

        A stack that is up is reused (after waiting until it answers); the remains of a dead one are stopped
        first. Then: refuse taken ports, set up the parts (:meth:`_prepare`), start the processes and wait
        for them (:meth:`_start_processes`), record the stack (:meth:`_record`).
        """
        with self._changing():
            current = self.info()
            if current is not None:
                if all(_pid_alive(p.pid) for p in current.processes):
                    # Every process lives: a busy part may answer slowly, so wait for it instead of restarting.
                    self._wait_ready(current)
                    return current
                # A process of a previous stack died: stop what is left, then start clean.
                self.down()
            self._refuse_taken_ports()
            prepared = self._prepare()
            procs = self._start_processes(prepared)
            return self._record(prepared, procs)

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """Hold the stack's lock while processes are stopped, started or recorded (``up``, a restart, a
        recycle, ``down``): another process that looks at the stack meanwhile would see the old pids dead
        and tear the whole stack down to start it again. Re-entrant within a process."""
        key = str(self.workdir)
        if _HELD.get(key):
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        with (self.workdir / "stack.lock").open("a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            _HELD[key] = 1
            try:
                yield
            finally:
                _HELD[key] = 0
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _refuse_taken_ports(self) -> None:
        """Raise :class:`StackSetupError` naming every configured port something else already holds."""
        cfg = self.config
        ports = [("kafka_port", cfg.kafka_port), ("chroma_port", cfg.chroma_port)]
        for cluster in cfg.clusters():
            ports += [(f"{cluster.prefix}_rest_port", cluster.rest_port),
                      (f"{cluster.prefix}_rpc_port", cluster.rpc_port)]
        busy = [(n, p) for n, p in ports if not port_free(p)]
        if busy:
            names = ", ".join(f"{n}={p}" for n, p in busy)
            raise StackSetupError(
                f"port(s) already taken on 127.0.0.1: {names}. Stop what holds them, or pick other ports "
                "(e.g. `flink-replay stack up --flink-rest-port 18081 --kafka-port 19092`)."
            )

    def install(self) -> tuple[Path, Path, list[Path], Path]:
        """Fetch (or reuse) the parts — the Flink-side venv, tansu, the connector jars — without starting
        anything (``flink-replay stack prepare``: what a fresh machine spends minutes on, done ahead of the
        first ``up``). Returns the Flink side's python, tansu, the jars and Flink's home."""
        with self._changing():  # (which creates the work folder)
            setup_log = self._p("logs", "setup.log")
            downloads = self.cache_dir / "downloads"
            flink_venv = self.cache_dir / "flink-venv"
            flink_python = ensure_flink_venv(flink_venv, setup_log)
            tansu = ensure_tansu(self.cache_dir / "bin", downloads, setup_log)
            jars = ensure_connector_jars(self.cache_dir / "jars", downloads, setup_log)
            flink_home = venv_site_packages(flink_venv) / "pyflink"
            _kafka_clients_in_lib(flink_home, jars)
            _agents_jar_in_lib(flink_home, flink_venv)
        return flink_python, tansu, jars, flink_home

    def _prepare(self) -> _Prepared:
        """Fetch (or reuse) the parts, clear what a crashed stack left behind, write each cluster's config."""
        cfg = self.config
        java_home = find_java_home()
        flink_python, tansu, jars, flink_home = self.install()
        for cluster in cfg.clusters():  # what a crashed or killed stack left behind
            _clear_dirs(self._cp(cluster, "tmp"), self._cp(cluster, "web"))
        conf_dirs = {c.name: self._write_flink_conf(flink_home, flink_python, java_home, c) for c in cfg.clusters()}
        mem0_dir = self._p("mem0")
        mem0_dir.mkdir(parents=True, exist_ok=True)
        env = offline_env(mem0_dir)
        return _Prepared(java_home, flink_python, flink_home, tansu, jars, conf_dirs, mem0_dir, env)

    def _start_processes(self, prepared: _Prepared) -> list[ProcessInfo]:
        """Start tansu, Chroma and every Flink cluster, and wait until each answers. On any failure (or an
        interrupt) every process started so far is terminated and the error re-raised."""
        cfg = self.config
        procs: list[ProcessInfo] = []
        bootstrap = f"127.0.0.1:{cfg.kafka_port}"
        try:
            procs.append(
                _spawn(
                    "tansu",
                    [
                        str(prepared.tansu),
                        "broker",
                        "--listener-url",
                        f"tcp://{bootstrap}",
                        "--advertised-listener-url",
                        f"tcp://{bootstrap}",
                        "--storage-engine",
                        "memory://tansu/",
                    ],
                    self._p("logs", "tansu.log"),
                )
            )
            chroma_bin = prepared.flink_python.parent / "chroma"
            procs.append(
                _spawn(
                    "chroma",
                    [
                        str(chroma_bin),
                        "run",
                        "--path",
                        str(self._p("chroma")),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(cfg.chroma_port),
                    ],
                    self._p("logs", "chroma.log"),
                    env=prepared.env,
                )
            )
            for cluster in cfg.clusters():
                conf_dir = prepared.conf_dirs[cluster.name]
                procs.extend(self._start_flink(prepared.flink_home, conf_dir, prepared.java_home, cluster))
            by_name = {p.name: p for p in procs}
            _wait(lambda: kafka_answers(bootstrap), cfg.start_timeout, "tansu metadata", by_name["tansu"])
            _wait(
                lambda: chroma_answers("127.0.0.1", cfg.chroma_port),
                cfg.start_timeout,
                "the Chroma heartbeat",
                by_name["chroma"],
            )
            for cluster in cfg.clusters():
                _wait(
                    lambda url=cluster.rest_url: flink_taskmanagers(url) >= 1,  # type: ignore[misc]
                    cfg.start_timeout,
                    f"a Flink TaskManager to register ({cluster.name} cluster)",
                    by_name[f"{cluster.prefix}-taskmanager"],
                )
        except BaseException:
            for p in procs:
                _terminate(p.pid)
            raise
        return procs

    def _record(self, prepared: _Prepared, procs: list[ProcessInfo]) -> StackInfo:
        """Write the connections file, ``stack.env`` and ``stack.json`` of the started stack; return its info."""
        cfg = self.config
        java_home, flink_python, flink_home, _, jars, conf_dirs, mem0_dir, env = prepared
        conf_dir = conf_dirs["production"]
        rest_url = f"http://127.0.0.1:{cfg.flink_rest_port}"
        bootstrap = f"127.0.0.1:{cfg.kafka_port}"
        info = StackInfo(
            workdir=str(self.workdir),
            flink_home=str(flink_home),
            flink_conf_dir=str(conf_dir),
            flink_python=str(flink_python),
            flink_rest_url=rest_url,
            kafka_bootstrap=bootstrap,
            chroma_host="127.0.0.1",
            chroma_port=cfg.chroma_port,
            mem0_dir=str(mem0_dir),
            connector_jars=[str(j) for j in jars],
            savepoint_dir=str(self._p("savepoints")),
            checkpoint_dir=str(self._p("checkpoints")),
            java_home=str(java_home),
            processes=procs,
            env=env,
            connections_file=str(self._p(CONNECTIONS_FILE)),
            replay_flink_rest_url=f"http://127.0.0.1:{cfg.replay_rest_port}" if cfg.replay_cluster else None,
            replay_flink_conf_dir=str(conf_dirs["replay"]) if cfg.replay_cluster else None,
        )
        self._write_connections(info)
        self._p(ENV_FILE).write_text(
            "".join(
                f"export {k}={v}\n"
                for k, v in {
                    **env,
                    "FLINK_HOME": str(flink_home),
                    "FLINK_CONF_DIR": str(conf_dir),
                    "JAVA_HOME": str(java_home),
                }.items()
            )
        )
        self.stack_file.write_text(info.model_dump_json(indent=2))
        return info

    def _wait_ready(self, info: StackInfo) -> None:
        by_name = {p.name: p for p in info.processes}
        timeout = self.config.start_timeout
        _wait(lambda: kafka_answers(info.kafka_bootstrap), timeout, "tansu metadata", by_name.get("tansu"))
        _wait(lambda: chroma_answers(info.chroma_host, info.chroma_port), timeout, "the Chroma heartbeat",
              by_name.get("chroma"))
        _wait(lambda: flink_taskmanagers(info.flink_rest_url) >= 1, timeout, "a Flink TaskManager to register",
              by_name.get("flink-taskmanager"))
        if info.replay_flink_rest_url:
            url = info.replay_flink_rest_url
            _wait(lambda: flink_taskmanagers(url) >= 1, timeout, "a replay-cluster TaskManager to register",
                  by_name.get("replay-taskmanager"))

    def _write_flink_conf(
        self, flink_home: Path, flink_python: Path, java_home: Path, cluster: ClusterLayout
    ) -> Path:
        cfg = self.config
        conf_dir = self._cp(cluster, "flink-conf")
        if conf_dir.exists():
            shutil.rmtree(conf_dir)
        shutil.copytree(flink_home / "conf", conf_dir)
        original = yaml.safe_load((flink_home / "conf" / "config.yaml").read_text()) or {}
        java_opts = _lookup(original, "env.java.opts.all")
        # Fix 2 of STACK.md: flink-python in lib/ (+ pemja parent-first) so a second job on a TM works.
        for jar in (flink_home / "opt").glob("flink-python-*.jar"):
            target = flink_home / "lib" / jar.name
            if not target.exists():
                shutil.copy2(jar, target)
        for d in ("logs", "pids", "tmp", "web", "savepoints", "checkpoints"):
            self._cp(cluster, d).mkdir(parents=True, exist_ok=True)
        conf: dict[str, Any] = {
            "env.java.opts.all": " ".join(o for o in (java_opts, cfg.jvm_options) if o),
            "env.java.home": str(java_home),
            "env.log.dir": str(self._cp(cluster, "logs")),
            "env.pid.dir": str(self._cp(cluster, "pids")),
            "jobmanager.bind-host": "127.0.0.1",
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": cluster.rpc_port,
            "jobmanager.memory.process.size": cfg.jobmanager_memory,
            "jobmanager.memory.jvm-metaspace.size": cfg.jobmanager_metaspace,
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.host": "127.0.0.1",
            "taskmanager.numberOfTaskSlots": cfg.task_slots,
            "taskmanager.memory.process.size": cfg.taskmanager_memory,
            # Every Flink Agents job loads the ~115 MB flink-agents jar in its own classloader and the TM's shared
            # embedded Python keeps it reachable: with the default 256m the TM dies of Metaspace OOM after ~8 agent
            # jobs. 1g lasts ~40 agent jobs per TaskManager start.
            "taskmanager.memory.jvm-metaspace.size": "1024m",
            "parallelism.default": 1,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": cluster.rest_port,
            "execution.checkpointing.dir": f"file://{self._cp(cluster, 'checkpoints')}",
            "execution.checkpointing.savepoint-dir": f"file://{self._cp(cluster, 'savepoints')}",
            "web.tmpdir": str(self._cp(cluster, "web")),
            "io.tmp.dirs": str(self._cp(cluster, "tmp")),
            # Every agent job ships the ~115 MB flink-agents jar as a blob: drop finished jobs' blobs after a
            # minute instead of an hour, so a long session does not fill the disk.
            "blob.service.cleanup.interval": 60,
            # The metaspace guard and the soak benchmark read the JobManager's metrics over REST: fresh
            # within a second instead of Flink's 10 s cache.
            "metrics.fetcher.update-interval": 1000,
            # The REST API serves job and vertex states from a cache kept for web.refresh-interval (3 s by
            # default): production's resubmitted job was seen RUNNING up to 3 s after its last task ran, and that
            # wait counted as downtime (stop windows' "running" step took 3.0 or 6.1 s, never between).
            "web.refresh-interval": 200,
            "python.executable": str(flink_python),
            "python.client.executable": str(flink_python),
            # Small Python bundles: savepoints complete in about a second instead of hanging.
            "python.fn-execution.bundle.size": 20,
            "python.fn-execution.bundle.time": 200,
            # Kafka's client classes from lib/ (see _kafka_clients_in_lib), loaded once per JVM for every job.
            "classloader.parent-first-patterns.additional": ["pemja.", "org.apache.kafka.", "org.apache.flink.agents."],
            **_restart_strategy(cluster.name),
        }
        (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=True))
        (conf_dir / "masters").write_text(f"127.0.0.1:{cluster.rest_port}\n")
        (conf_dir / "workers").write_text("127.0.0.1\n")
        return conf_dir

    def _flink_env(self, conf_dir: Path, java_home: Path, cluster: ClusterLayout) -> dict[str, str]:
        return {
            **os.environ,
            "FLINK_CONF_DIR": str(conf_dir),
            "JAVA_HOME": str(java_home),
            "FLINK_LOG_DIR": str(self._cp(cluster, "logs")),
            "FLINK_PID_DIR": str(self._cp(cluster, "pids")),
            **offline_env(self._p("mem0")),
        }

    def _start_flink_daemon(
        self, flink_home: Path, env: dict[str, str], role: str, cluster: ClusterLayout
    ) -> ProcessInfo:
        script, kind = _FLINK_DAEMONS[role]
        name = f"{cluster.prefix}-{role}"
        pids = self._cp(cluster, "pids")
        pid_file = next(iter(pids.glob(f"flink-*-{kind}.pid")), None)
        if pid_file is not None:  # a stale pid file makes the script refuse to start a second instance
            pid_file.unlink()
        log = self._cp(cluster, "logs", f"{name}-start.log")
        with log.open("ab") as out:
            subprocess.run(
                ["bash", str(flink_home / "bin" / script), "start"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        pid = _read_flink_pid(pids, kind)
        if pid is None:
            raise StackSetupError(f"{script} start wrote no pid; see {log}:\n{_tail(log)}")
        flink_log = next(iter(sorted(self._cp(cluster, "logs").glob(f"flink-*-{kind}-*.log"))), log)
        return ProcessInfo(name=name, pid=pid, log=str(flink_log))

    def _start_flink(
        self, flink_home: Path, conf_dir: Path, java_home: Path, cluster: ClusterLayout
    ) -> list[ProcessInfo]:
        env = self._flink_env(conf_dir, java_home, cluster)
        return [self._start_flink_daemon(flink_home, env, role, cluster) for role in _FLINK_DAEMONS]

    def restart_taskmanager(self, cluster: str = "production") -> StackInfo:
        """Replace ``cluster``'s TaskManager with a fresh one (a new embedded Python, an empty metaspace).

        Every Flink Agents job leaves its classes in the TaskManager's metaspace and its modules in the
        shared embedded interpreter; long test sessions restart it between modules. Jobs still running on
        it fail over.
        """
        return self._restart(self._cluster(cluster), ("taskmanager",))

    def recycle_cluster(self, cluster: str = "replay") -> StackInfo:
        """Restart ``cluster``'s JobManager and TaskManager: the recycling policy for the metaspace every
        Python submission leaves in the JobManager (docs/local-stack.md). Jobs on it are lost: recycle the
        replay cluster between replay runs, never production's while production runs."""
        return self._restart(self._cluster(cluster), ("jobmanager", "taskmanager"))

    def recycle_if_worn(self, cluster: str = "replay", min_free_mb: float = 250.0, *, when_busy: bool = False) -> bool:
        """The local recycling policy: restart ``cluster`` when its JobManager has less than ``min_free_mb``
        of metaspace left and no job runs on it (each Python submission leaves ~14 MB there; the
        submitters refuse a run below 96 MB). ``when_busy``: recycle even with jobs running (they are
        lost — for a test session between modules, never for a production anyone needs). Returns whether
        it recycled."""
        info = self.info()
        if info is None:
            return False
        url = info.rest_url(cluster)
        try:
            names = ",".join(("Status.JVM.Memory.Metaspace.Used", "Status.JVM.Memory.Metaspace.Max"))
            for attempt in range(2):  # REST serves a cached copy and refreshes it in the background:
                if attempt:  # the second answer is fresh (metrics.fetcher.update-interval is 1 s here)
                    time.sleep(1.1)
                metrics = requests.get(f"{url}/jobmanager/metrics", params={"get": names}, timeout=5).json()
                values = {m["id"]: float(m["value"]) for m in metrics}
                free = (values["Status.JVM.Memory.Metaspace.Max"] - values["Status.JVM.Memory.Metaspace.Used"]) / 2**20
                if free >= min_free_mb + _STALE_READING_MARGIN_MB:
                    break  # even a stale copy leaves room for more submissions than a test module makes
            running = requests.get(f"{url}/jobs/overview", timeout=5).json()["jobs"]
        except (requests.RequestException, KeyError, ValueError):
            return False
        busy = any(j["state"] not in ("FINISHED", "FAILED", "CANCELED") for j in running)
        if free >= min_free_mb or (busy and not when_busy):
            return False
        self.recycle_cluster(cluster)
        return True

    def _restart(self, cluster: ClusterLayout, roles: tuple[str, ...]) -> StackInfo:
        with self._changing():
            return self._restart_locked(cluster, roles)

    def _restart_locked(self, cluster: ClusterLayout, roles: tuple[str, ...]) -> StackInfo:
        info = self.info()
        if info is None:
            raise StackSetupError(f"no stack in {self.workdir}: run `flink-replay stack up` first")
        names = {f"{cluster.prefix}-{role}" for role in roles}
        for proc in info.processes:
            if proc.name in names:
                _terminate(proc.pid)
        if "jobmanager" in roles:
            _clear_dirs(self._cp(cluster, "tmp"), self._cp(cluster, "web"))
        for leftover in self._cp(cluster, "tmp").glob("tm_*"):  # the old TaskManager's blobs and working dirs
            shutil.rmtree(leftover, ignore_errors=True)
        conf_dir = self._cp(cluster, "flink-conf")
        env = self._flink_env(conf_dir, Path(info.java_home), cluster)
        fresh = {p.name: p for p in (self._start_flink_daemon(Path(info.flink_home), env, r, cluster) for r in roles)}
        info.processes = [fresh.get(p.name, p) for p in info.processes]
        self.stack_file.write_text(info.model_dump_json(indent=2))
        _wait(lambda: flink_taskmanagers(cluster.rest_url) >= 1 and _free_slots(cluster.rest_url) > 0,
              self.config.start_timeout, f"the {cluster.name} cluster's TaskManager to register",
              fresh.get(f"{cluster.prefix}-taskmanager"))
        return info

    def taskmanager_metaspace_used(self, cluster: str = "production") -> float:
        """Fraction of ``cluster``'s TaskManager metaspace in use (0.0 when it cannot be read)."""
        info = self.info()
        if info is None:
            return 0.0
        try:
            url = info.rest_url(cluster)
            tms = requests.get(f"{url}/taskmanagers", timeout=5).json()["taskmanagers"]
            metrics = requests.get(
                f"{url}/taskmanagers/{tms[0]['id']}/metrics",
                params={"get": "Status.JVM.Memory.Metaspace.Used,Status.JVM.Memory.Metaspace.Max"},
                timeout=5,
            ).json()
            values = {m["id"]: float(m["value"]) for m in metrics}
            return values["Status.JVM.Memory.Metaspace.Used"] / values["Status.JVM.Memory.Metaspace.Max"]
        except (requests.RequestException, KeyError, IndexError, ValueError, ZeroDivisionError, StackSetupError):
            return 0.0

    def _write_connections(self, info: StackInfo) -> None:
        """``connections.json``: the stack's addresses and, in the Flink connections' extra, where a
        submitter on this host finds Flink (the provider reads connections, never the stack's files), and the
        folder of the JobManagers' submission leases (shared by every Airflow worker of the stack: standalone's
        processes and the Celery workers that act as hosts of their own)."""
        leases = f"file://{Path(info.workdir) / 'submission-leases'}"
        client = {"flink_home": info.flink_home, "java_home": info.java_home, "submission_lease_uri": leases}
        conns: dict[str, Any] = {
            "flink_default": {
                "conn_type": "flink_rest",
                "host": info.flink_rest_url,
                "extra": json.dumps({**client, "flink_conf_dir": info.flink_conf_dir}),
            },
            "kafka_default": {
                "conn_type": "kafka",
                "extra": json.dumps({"bootstrap.servers": info.kafka_bootstrap}),
            },
            "mem0_default": {"conn_type": "mem0", "extra": json.dumps(info.mem0_config())},
        }
        if info.replay_flink_rest_url:
            conns[REPLAY_CONN_ID] = {
                "conn_type": "flink_rest",
                "host": info.replay_flink_rest_url,
                "extra": json.dumps({**client, "flink_conf_dir": info.replay_flink_conf_dir}),
            }
        Path(info.connections_file).write_text(json.dumps(conns, indent=2))

    def record_airflow(self, url: str, processes: list[ProcessInfo], postgres_dir: Path) -> StackInfo:
        """Record the distributed Airflow started beside the stack (:mod:`.celery_airflow`), so ``status`` shows
        its parts and ``down`` stops them."""
        with self._changing():
            info = self.info()
            if info is None:
                raise StackSetupError(f"no stack in {self.workdir}: run `flink-replay stack up` first")
            info.airflow_url, info.airflow_processes = url, processes
            info.airflow_postgres_dir = str(postgres_dir)
            self.stack_file.write_text(info.model_dump_json(indent=2))
            return info

    def stop_airflow(self, timeout: float = 20.0) -> list[str]:
        """Stop the recorded distributed Airflow, if any, and forget it; return the names of its parts that
        were alive."""
        with self._changing():
            info = self.info()
            if info is None or not (info.airflow_processes or info.airflow_postgres_dir):
                return []
            from airflow_flink_replay.local.celery_airflow import stop_parts

            pg_dir = Path(info.airflow_postgres_dir) if info.airflow_postgres_dir else None
            stopped = stop_parts(info.airflow_processes, pg_dir, timeout)
            info.airflow_url, info.airflow_processes, info.airflow_postgres_dir = None, [], None
            self.stack_file.write_text(info.model_dump_json(indent=2))
            return stopped

    # -- stopping
    def down(self, timeout: float = 20.0) -> list[str]:
        """Stop the processes ``up`` started (SIGTERM, then SIGKILL); return their names."""
        with self._changing():
            return self._down_locked(timeout)

    def _down_locked(self, timeout: float) -> list[str]:
        stopped = self.stop_airflow(timeout)
        info = self.info()
        if info is None:
            return stopped
        for proc in info.processes:
            if _terminate(proc.pid, timeout):
                stopped.append(proc.name)
        self.stack_file.unlink(missing_ok=True)
        for cluster in self.config.clusters():  # Flink's blobs, uploaded jars, Python envs of jobs
            for pid_file in self._cp(cluster, "pids").glob("*.pid"):
                pid_file.unlink(missing_ok=True)
            _clear_dirs(self._cp(cluster, "tmp"), self._cp(cluster, "web"))
        return stopped


#: Flink's daemon scripts per role and the kind their pid file is named after.
_FLINK_DAEMONS = {
    "jobmanager": ("jobmanager.sh", "standalonesession"),
    "taskmanager": ("taskmanager.sh", "taskexecutor"),
}


def _kafka_clients_in_lib(flink_home: Path, jars: list[Path]) -> None:
    """Put kafka-clients in Flink's lib/ (with ``org.apache.kafka.`` parent-first in the cluster config): every
    job then uses the one copy the JVM loaded and compiled already, instead of loading its own in a fresh
    classloader. Flink Agents' action-state store lists the broker's topics with a fresh AdminClient and a
    100 ms timeout when its operator starts: with cold classes that timed out in every replay job, which
    Flink then restarted once (a second Python start: 17-25 s a replay job instead of 9-10 s).
    The jobs still ship the jar (a cluster without it in lib/ needs it); parent-first makes that copy unused
    here."""
    for jar in jars:
        target = flink_home / "lib" / jar.name
        if jar.name.startswith("kafka-clients-") and not target.exists():
            shutil.copy2(jar, target)


def _agents_jar_in_lib(flink_home: Path, flink_venv: Path) -> None:
    """Put Flink Agents' dist jar in Flink's lib/, as Flink Agents' installation guide does (with
    ``org.apache.flink.agents.`` parent-first in the cluster config, and the jobs then ship no copy of it):
    every JVM loads and compiles its classes once, instead of every agent job loading the ~115 MB jar in a
    classloader of its own. It is named to sort after kafka-clients and log4j (Flink puts lib/'s jars on
    the classpath in name order): the fat jar carries other versions of both, and Flink's own win. A copy of
    another Flink Agents version (from before an upgrade) is removed: two on the classpath would mix."""
    lib = flink_home / "lib"
    dist = next(lib.glob("flink-dist-*.jar"), None)
    if dist is None:
        return
    major = ".".join(dist.name.removeprefix("flink-dist-").split(".")[:2])
    source = venv_site_packages(flink_venv) / "flink_agents" / "lib" / f"flink-{major}"
    wanted = {f"zz-{jar.name}": jar for jar in source.glob("flink-agents-dist-*.jar")}
    for stale in lib.glob("zz-flink-agents-dist-*.jar"):
        if stale.name not in wanted:
            stale.unlink()
    for name, jar in wanted.items():
        target = lib / name
        if not target.exists() or target.stat().st_size != jar.stat().st_size:
            shutil.copy2(jar, target)


def _clear_dirs(*folders: Path) -> None:
    """Empty ``folders`` (kept themselves); only called when no Flink process uses them."""
    for folder in folders:
        for child in folder.glob("*") if folder.is_dir() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _free_slots(rest_url: str) -> int:
    try:
        return int(requests.get(f"{rest_url}/overview", timeout=2).json().get("slots-available", 0))
    except (requests.RequestException, ValueError):
        return 0


def _lookup(tree: dict[str, Any], dotted: str) -> Any:
    """Read a key from Flink's config.yaml, nested or flattened."""
    if dotted in tree:
        return tree[dotted]
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _read_flink_pid(pid_dir: Path, kind: str) -> int | None:
    for _ in range(40):
        for f in pid_dir.glob(f"flink-*-{kind}.pid"):
            text = f.read_text().split()
            if text:
                return int(text[-1])
        time.sleep(0.25)
    return None


def _descendants(pid: int) -> list[int]:
    """All processes below ``pid`` (Python workers of a TaskManager, the gateway JVM flink_agents starts)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _terminate(pid: int, timeout: float = 20.0) -> bool:
    """SIGTERM a process and everything below it, SIGKILL after ``timeout``. True if it was alive."""
    if not _pid_alive(pid):
        return False
    family = [pid, *_descendants(pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for member in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(_pid_alive(m) for m in family):
                return True
            time.sleep(0.2)
    return True

"""A distributed Airflow on the local stack: the CeleryExecutor, PostgreSQL, Redis, and workers that act as hosts.

:class:`~airflow_flink_replay.local.airflow_server.AirflowServer` runs ``airflow standalone``: every task on one
host. Production Airflows run a DAG run's tasks on several hosts, and what the provider keeps per host (the
submission lock in ``$FLINK_REPLAY_LOCK_DIR``, temp files) only meets that when tasks of one run land on different
hosts. :class:`CeleryAirflow` starts, all bound to 127.0.0.1 on free ports and with every file in its Airflow home:

- PostgreSQL (the machine's package) as the metadata DB and Celery's result backend, its data in ``<home>/postgres``;
- Redis as the Celery broker, its folder ``<home>/redis``;
- ``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer``, each a process of its own;
- N ``airflow celery worker`` processes, each acting as a host of its own (:class:`WorkerHost`): its Celery node
  name, the host name its task instances report, its temp folder, submission lock folder and log file.

A local test stack, and secured as one: the DB role and Redis have passwords (made once per home, kept with the
token and Fernet keys in ``<home>/celery-secrets.json``, mode 0600); PostgreSQL's superuser logs in only through the
unix socket in its data folder, which only PostgreSQL's owner reaches. No secret is on a command line or in a log
line written here.

Task logs: every worker writes them to the home's ``logs`` folder (a real deployment's shared log volume) and the
api-server reads them there, the triggerer's too. So the workers and the triggerer serve no logs
(``--skip-serve-logs``): Airflow's log servers listen on every interface, and two workers on one machine would
both take port 8793. (The workers' host names do not resolve: a served log could not be fetched from them anyway.)
"""

from __future__ import annotations

import base64
import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from airflow_flink_replay.exceptions import StackSetupError
from airflow_flink_replay.local.airflow_server import AirflowServer, shared_env

#: The variable a worker's host name is in (read by :func:`worker_hostname`, each worker's ``hostname_callable``).
WORKER_HOSTNAME_ENV = "FLINK_REPLAY_WORKER_HOSTNAME"
HOSTNAME_CALLABLE = f"{__name__}.worker_hostname"
SECRETS_FILE = "celery-secrets.json"
#: Airflow's database and the role it logs in as.
DB_NAME = DB_USER = "airflow"
PG_SUPERUSER = "postgres"
#: The Airflow parts besides the workers, in the order they start.
AIRFLOW_PARTS = ("api-server", "scheduler", "dag-processor", "triggerer")
_HEALTHY_PARTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
#: The set-up programs run to their end (not parts: never recorded, stopped first by :meth:`CeleryAirflow.stop`).
_SETUP_PROGRAMS = ("initdb", "migrate")
#: A unix socket's path is at most 107 bytes (``sun_path``).
_SOCKET_PATH_MAX = 107
_FIX_PACKAGES = "or run `make system-deps` as root"


def worker_hostname() -> str:
    """The host name of the worker this runs in (its ``hostname_callable``): ``$FLINK_REPLAY_WORKER_HOSTNAME``,
    else the machine's FQDN. Task instances report it; the execution API checks heartbeats against it."""
    return os.environ.get(WORKER_HOSTNAME_ENV) or socket.getfqdn()


# ------------------------------------------------------------------------------------------------- layout
class Ports(NamedTuple):
    """The loopback ports of one :class:`CeleryAirflow`."""

    api: int
    postgres: int
    redis: int
    trigger_log: int


class Part(NamedTuple):
    """One started part: its name, its pid (the leader of a session of its own) and its log."""

    name: str
    pid: int
    log: str


class _Recorded(Protocol):
    """A recorded part (a :class:`Part`, or the stack's record of one)."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int: ...


class WorkerHost(NamedTuple):
    """One Celery worker and the host it acts as."""

    #: ``worker-a``: the host name its task instances report (their ``hostname``)
    name: str
    #: ``worker-a@<machine>``: its Celery node name (``--celery-hostname``)
    node: str
    #: its own folder: ``tmp`` (``TMPDIR``, ``TEMP``, ``TMP``) and ``locks`` (``FLINK_REPLAY_LOCK_DIR``)
    folder: Path
    log: Path

    @property
    def tmp(self) -> Path:
        """The temp folder of this host."""
        return self.folder / "tmp"

    @property
    def locks(self) -> Path:
        """The provider's host-local submission lock folder of this host (never shared with another worker)."""
        return self.folder / "locks"


def free_ports(count: int, avoid: Iterable[int] = ()) -> list[int]:
    """``count`` different free loopback ports, none of ``avoid`` (held together while they are picked, so none
    repeats)."""
    held: list[socket.socket] = []
    avoided = set(avoid)
    try:
        while len([s for s in held if s.getsockname()[1] not in avoided]) < count:
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(port) for s in held if (port := s.getsockname()[1]) not in avoided]
    finally:
        for s in held:
            s.close()


def worker_hosts(home: Path, logs_dir: Path, count: int, machine: str | None = None) -> list[WorkerHost]:
    """``count`` :class:`WorkerHost`: ``worker-a``, ``worker-b``, ... (``worker-27`` on), their folders under
    ``<home>/workers``, their logs in ``logs_dir``."""
    machine = machine or socket.gethostname()
    hosts = []
    for i in range(count):
        name = f"worker-{string.ascii_lowercase[i]}" if i < len(string.ascii_lowercase) else f"worker-{i + 1}"
        hosts.append(WorkerHost(name=name, node=f"{name}@{machine}", folder=home / "workers" / name,
                                log=logs_dir / f"{name}.log"))
    return hosts


# ------------------------------------------------------------------------------------------------ secrets
@dataclass(frozen=True)
class StackSecrets:
    """The passwords and keys of one home's Celery Airflow; its repr shows none of them."""

    db_password: str = field(repr=False)
    redis_password: str = field(repr=False)
    jwt_secret: str = field(repr=False)
    fernet_key: str = field(repr=False)
    api_secret_key: str = field(repr=False)


def load_secrets(path: Path, env: dict[str, str]) -> StackSecrets:
    """The secrets kept in ``path`` (mode 0600), made there the first time. Kept, not made per start: the
    metadata DB holds values encrypted with the Fernet key and the role's password, and tokens the api-server gave
    stay valid across a restart. A JWT secret or Fernet key ``env`` names wins."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    made = {
        "db_password": secrets.token_hex(16),
        "redis_password": secrets.token_hex(16),
        "jwt_secret": secrets.token_hex(32),  # 64 bytes: what PyJWT asks of an HS512 key
        "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "api_secret_key": secrets.token_hex(16),
    }
    values = {key: str(stored.get(key) or fresh) for key, fresh in made.items()}
    if values != stored:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(values, out)
    values["jwt_secret"] = env.get("AIRFLOW__API_AUTH__JWT_SECRET") or values["jwt_secret"]
    values["fernet_key"] = env.get("AIRFLOW__CORE__FERNET_KEY") or values["fernet_key"]
    return StackSecrets(**values)


# ---------------------------------------------------------------------------------------------- environment
def celery_env(env: dict[str, str], ports: Ports, keys: StackSecrets, *, deferrable: bool = True) -> dict[str, str]:
    """``env`` with what every part needs (:func:`shared_env`) and the Celery setup: the CeleryExecutor, the
    metadata DB on PostgreSQL, Redis as the broker, Celery's results in PostgreSQL, one token secret, Fernet key
    and API secret key for all, Celery's redelivery timeout said (Airflow warns when it is not), and the
    triggerer's log port one where nothing listens (the triggerer serves no logs: module docstring). A SQL
    connection ``env`` names is replaced."""
    out = shared_env({**env, "AIRFLOW__API_AUTH__JWT_SECRET": keys.jwt_secret}, ports.api, deferrable=deferrable)
    out.pop("AIRFLOW__CORE__SQL_ALCHEMY_CONN", None)
    db = f"{DB_USER}:{keys.db_password}@127.0.0.1:{ports.postgres}/{DB_NAME}"
    out.update({
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{db}",
        "AIRFLOW__CELERY__BROKER_URL": f"redis://:{keys.redis_password}@127.0.0.1:{ports.redis}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://{db}",
        "AIRFLOW__CORE__FERNET_KEY": keys.fernet_key,
        "AIRFLOW__API__SECRET_KEY": keys.api_secret_key,
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.trigger_log),
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "86400",
    })
    return out


def worker_env(env: dict[str, str], host: WorkerHost) -> dict[str, str]:
    """``env`` (a :func:`celery_env`) for the worker acting as ``host``: its temp folder, its submission lock
    folder and its host name (what its task instances report)."""
    return {
        **env,
        "TMPDIR": str(host.tmp),
        "TEMP": str(host.tmp),
        "TMP": str(host.tmp),
        "FLINK_REPLAY_LOCK_DIR": str(host.locks),
        WORKER_HOSTNAME_ENV: host.name,
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": HOSTNAME_CALLABLE,
    }


# ---------------------------------------------------------------------------------------------- the binaries
def postgres_bindir() -> Path:
    """The folder of the machine's PostgreSQL server programs (``initdb``, ``postgres``, ``pg_ctl``):
    ``pg_config --bindir``, else the newest ``/usr/lib/postgresql/*/bin``."""
    candidates = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False, timeout=10)
        candidates.append(found.stdout.strip())
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(versions, key=lambda p: [int(x) for x in Path(p).parent.name.split(".") if x.isdigit()],
                         reverse=True)
    for candidate in candidates:
        if candidate and all((Path(candidate) / tool).exists() for tool in ("initdb", "postgres", "pg_ctl")):
            return Path(candidate)
    raise StackSetupError(
        "PostgreSQL's server programs (initdb, postgres, pg_ctl) not found. Fix: install them (apt-get install "
        f"postgresql) {_FIX_PACKAGES}"
    )


def redis_server() -> Path:
    """The machine's ``redis-server``."""
    found = shutil.which("redis-server")
    if found is None:
        raise StackSetupError(f"redis-server not found. Fix: install it (apt-get install redis-server) {_FIX_PACKAGES}")
    return Path(found)


def postgres_account() -> pwd.struct_passwd | None:
    """The account PostgreSQL runs as: ``postgres`` when this process is root (PostgreSQL refuses to run as
    root), None (this user) otherwise."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(PG_SUPERUSER)
    except KeyError:
        raise StackSetupError(
            "PostgreSQL refuses to run as root and there is no `postgres` user to run it as. Fix: install the "
            "postgresql package (it creates that user), or start this as a user other than root"
        ) from None


def enterable_temp_folder(prefix: str = "afr-celery-") -> Path:
    """A new folder under the system temp folder that other users may enter but not list (mode 0711): a place for a
    :class:`CeleryAirflow` home that PostgreSQL's account reaches when root runs it as ``postgres`` (pytest's
    ``tmp_path`` is private to its user). The caller removes it."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o711)
    return folder


def unreachable_folder(path: Path, uid: int, gids: set[int]) -> Path | None:
    """The first folder on the way to ``path`` (itself included) that the user ``uid`` (groups ``gids``) cannot
    enter, or None."""
    for folder in [*reversed(path.parents), path]:
        try:
            st = folder.stat()
        except OSError:
            return None  # not made yet: made by this process, with its own mode
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid in gids else 0o001
        if not st.st_mode & bit:
            return folder
    return None


# --------------------------------------------------------------------------------------------- processes
def session_members(sessions: Iterable[int]) -> list[int]:
    """The live processes of the sessions ``sessions``: every part starts a session of its own, and whatever it
    starts stays in it (Airflow's task processes move to a process group of their own, not out of the session)."""
    wanted = set(sessions)
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) in wanted:
            found.append(int(stat.parent.name))
    return found


def stop_sessions(sessions: Iterable[int], timeout: float = 20.0) -> bool:
    """SIGTERM every process of ``sessions``, SIGKILL what is left after ``timeout``; True if any was alive."""
    wanted = list(sessions)
    if not session_members(wanted):
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        for pid in session_members(wanted):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not session_members(wanted):
                return True
            time.sleep(0.2)
    return True


def stop_postgres(data_dir: Path, timeout: float = 30.0) -> None:
    """``pg_ctl stop -m fast`` for the server of ``data_dir`` (as its owner), when its pid file says one runs."""
    if not (data_dir / "postmaster.pid").exists():
        return
    account = postgres_account()
    with contextlib.suppress(OSError, subprocess.SubprocessError, StackSetupError):
        cmd = [str(postgres_bindir() / "pg_ctl"), "stop", "-D", str(data_dir), "-m", "fast", "-w",
               "-t", str(int(timeout))]
        subprocess.run(cmd, capture_output=True, check=False, timeout=timeout + 10, cwd=str(data_dir),
                       **_as_account(account))


def stop_parts(processes: Iterable[_Recorded], postgres_dir: Path | None, timeout: float = 20.0) -> list[str]:
    """Stop recorded parts (each its own session, the pid its leader): the Airflow parts and Redis, then
    PostgreSQL with ``pg_ctl stop -m fast``, then whatever is left of its session. Returns the names that were
    alive."""
    parts = list(processes)
    clients = [p for p in parts if p.name != "postgres"]
    stopped = [p.name for p in parts if session_members([p.pid])]
    stop_sessions([p.pid for p in clients if p.name != "redis"], timeout)
    stop_sessions([p.pid for p in clients if p.name == "redis"], timeout)
    if postgres_dir is not None:
        stop_postgres(postgres_dir)
    stop_sessions([p.pid for p in parts if p.name == "postgres"], timeout)
    return stopped


def _as_account(account: pwd.struct_passwd | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a program as ``account`` (None: as this user)."""
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"(no log at {path})"


class _Stopping(Exception):
    """Raised in the start thread when :meth:`CeleryAirflow.stop` was called meanwhile."""


# --------------------------------------------------------------------------------------------- the Airflow
class CeleryAirflow(AirflowServer):
    """A distributed Airflow in ``env``'s Airflow home with its api-server on ``port`` (module docstring).

    :param env: the Airflow environment (:func:`airflow_env`); :func:`celery_env` is applied to it.
    :param port: the api-server's port (the UI and the REST API).
    :param log_path: where the set-up steps' output goes (``initdb``, ``airflow db migrate``); each part logs to
        a file of its own in :attr:`logs_dir` (:attr:`logs`).
    :param run_id_prefix: the prefix of the run ids :meth:`trigger` gives.
    :param workers: how many Celery workers (hosts) to start.
    :param worker_concurrency: how many tasks each worker runs at once.

    Constructing it picks its ports and reads (or makes) its secrets file; nothing starts before :meth:`launch`.
    """

    def __init__(self, env: dict[str, str], port: int, log_path: Path, *, deferrable: bool = True,
                 run_id_prefix: str = "api", workers: int = 2, worker_concurrency: int = 4) -> None:
        super().__init__(env, port, log_path, deferrable=deferrable, run_id_prefix=run_id_prefix)
        if workers < 1 or worker_concurrency < 1:
            raise ValueError(f"workers ({workers}) and worker_concurrency ({worker_concurrency}) must be at least 1")
        postgres, redis, trigger_log = free_ports(3, avoid=[port])
        self.ports = Ports(api=port, postgres=postgres, redis=redis, trigger_log=trigger_log)
        self.logs_dir = self.home / "logs" / "parts"
        self.postgres_dir = self.home / "postgres"
        self.redis_dir = self.home / "redis"
        self.hosts = worker_hosts(self.home, self.logs_dir, workers)
        self.worker_concurrency = worker_concurrency
        self._secrets = load_secrets(self.home / SECRETS_FILE, env)
        self.env = celery_env(env, self.ports, self._secrets, deferrable=deferrable)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._starter: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.step = "not launched"

    def __repr__(self) -> str:
        return f"CeleryAirflow({self.base}, home={self.home}, workers={[h.name for h in self.hosts]})"

    # --------------------------------------------------------------------------------------- what it is
    def worker_hostnames(self) -> list[str]:
        """The workers' host names (``worker-a``, ...): what their task instances' ``hostname`` shows."""
        return [h.name for h in self.hosts]

    def celery_nodes(self) -> list[str]:
        """The workers' Celery node names (``worker-a@<machine>``, given as ``--celery-hostname``)."""
        return [h.node for h in self.hosts]

    @property
    def logs(self) -> dict[str, Path]:
        """Every log file by part: ``setup`` (initdb, migrate), ``postgres``, ``redis``, the Airflow parts and
        each worker (by its host name)."""
        names = ["postgres", "redis", *AIRFLOW_PARTS]
        return {"setup": self.log, **{n: self.logs_dir / f"{n}.log" for n in names},
                **{h.name: h.log for h in self.hosts}}

    def commands(self) -> dict[str, list[str]]:
        """The command line of every Airflow part and worker, by part name (no secret is on any of them)."""
        airflow = [sys.executable, "-m", "airflow"]
        parts = {name: [*airflow, name] for name in AIRFLOW_PARTS}
        parts["api-server"] += ["--port", str(self.port), "--host", "127.0.0.1"]
        parts["triggerer"] += ["--skip-serve-logs"]
        for host in self.hosts:
            parts[host.name] = [*airflow, "celery", "worker", "--celery-hostname", host.node,
                                "--concurrency", str(self.worker_concurrency), "--skip-serve-logs"]
        return parts

    def processes(self) -> list[Part]:
        """The started parts (each the leader of a session of its own) with their logs."""
        logs = self.logs
        with self._lock:
            return [Part(name=name, pid=proc.pid, log=str(logs.get(name, self.log)))
                    for name, proc in self._procs.items() if name not in _SETUP_PROGRAMS]

    # ---------------------------------------------------------------------------------------- lifecycle
    def launch(self) -> None:
        """Start it without waiting (:meth:`wait_healthy` waits): in a thread, PostgreSQL (set up the first
        time), Redis, ``airflow db migrate``, then the Airflow parts and the workers, each in a session of its
        own. A missing program (PostgreSQL, Redis) fails here, at once."""
        postgres_bindir(), redis_server(), postgres_account()
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        self._failure = None
        self._starter = threading.Thread(target=self._start_all, name="celery-airflow-start", daemon=True)
        self._starter.start()

    def _start_all(self) -> None:
        try:
            for step, action in (("PostgreSQL", self._start_postgres), ("Redis", self._start_redis),
                                 ("airflow db migrate", self._migrate), ("the Airflow parts", self._start_parts)):
                self.step = step
                action()
            self.step = "started"
        except _Stopping:
            self.step = "stopped"
        except BaseException as err:  # re-raised by wait_healthy
            self._failure = err

    def wait_healthy(self, timeout: float = 300.0) -> CeleryAirflow:
        """Wait until every part has started, the health endpoint reports the metadatabase, scheduler,
        triggerer and DAG processor healthy, and every worker answers a Celery ping. A set-up step that fails,
        a part that exits, or a timeout fails with the tail of the log concerned."""
        assert self._starter is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while True:
            if self._stopping.is_set():
                raise RuntimeError(f"Celery Airflow was stopped (home {self.home})")
            if self._failure is not None:
                raise RuntimeError(f"Celery Airflow did not start ({self.step}): {self._failure}") from self._failure
            self._raise_if_a_part_exited()
            health = self.health() if self.step == "started" else None
            healthy = bool(health) and all((health or {}).get(p, {}).get("status") == "healthy" for p in _HEALTHY_PARTS)
            missing = set(self.celery_nodes()) - self.ready_workers() if healthy else set(self.celery_nodes())
            if healthy and not missing:
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"Celery Airflow not healthy within {timeout:.0f}s (step: {self.step}; health: "
                                   f"{health}; workers not answering: {sorted(missing)}); logs: {self.logs_dir}\n"
                                   f"{self.tail()}")
            time.sleep(2)

    def ready_workers(self) -> set[str]:
        """The Celery node names of the workers that answer a ping through the broker."""
        from celery import Celery

        app = Celery(broker=self.env["AIRFLOW__CELERY__BROKER_URL"])
        try:
            replies = app.control.ping(timeout=1.0) or []
            return {node for reply in replies for node in reply}
        except Exception:
            return set()
        finally:
            app.close()

    def wait(self) -> int:
        """Wait until a part exits (a person stops it with Ctrl-C: everything stops); returns its exit code."""
        try:
            while True:
                with self._lock:
                    exited = [p.returncode for n, p in self._procs.items()
                              if n not in _SETUP_PROGRAMS and p.poll() is not None]
                if exited:
                    return exited[0]
                time.sleep(1)
        except KeyboardInterrupt:
            self.stop()
            return 0

    def stop(self, timeout: float = 20.0) -> None:
        """Stop everything: the start thread, then every Airflow part, worker and Redis (SIGTERM to every
        process of their sessions, SIGKILL after ``timeout``), then PostgreSQL (``pg_ctl stop -m fast``). Safe to
        call twice, before :meth:`launch`, and after a launch that failed."""
        with self._lock:
            self._stopping.set()
            started = dict(self._procs)
        stop_sessions([p.pid for n, p in started.items() if n in _SETUP_PROGRAMS], 5.0)
        if self._starter is not None:
            self._starter.join(120)
        with self._lock:
            started = dict(self._procs)
        stop_parts([Part(name=n, pid=p.pid, log="") for n, p in started.items()],
                   self.postgres_dir if self.postgres_dir.exists() else None, timeout)
        for proc in started.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        with self._lock:
            self._procs.clear()

    def tail(self, chars: int = 1500) -> str:
        """The end of the set-up log, the scheduler's and every worker's."""
        logs = self.logs
        shown = ["setup", "scheduler", *self.worker_hostnames()]
        return "\n".join(f"--- {name} ({logs[name]})\n{_tail(logs[name], chars)}"
                         for name in shown if logs[name].exists())

    # ------------------------------------------------------------------------------------- the set-up steps
    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], log: Path, **kwargs: Any) -> None:
        """Start one part in a session of its own, its output to ``log``; refused once :meth:`stop` was called."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, log.open("ab") as out:
            if self._stopping.is_set():
                raise _Stopping
            self._procs[name] = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)

    def _raise_if_a_part_exited(self) -> None:
        with self._lock:
            exited = [(n, p.returncode) for n, p in self._procs.items()
                      if n not in _SETUP_PROGRAMS and p.poll() is not None]
        if exited:
            name, code = exited[0]
            log = self.logs.get(name, self.log)
            raise RuntimeError(f"{name} of the Celery Airflow exited with {code} (log: {log}):\n{_tail(log)}")

    def _run(self, name: str, cmd: list[str], env: dict[str, str], timeout: float, **kwargs: Any) -> None:
        """Run a set-up program to its end, its output to the set-up log; it fails naming that log."""
        with self.log.open("ab") as out:
            out.write(f"\n$ {' '.join(cmd)}\n".encode())
        self._spawn(name, cmd, env, self.log, **kwargs)
        proc = self._procs[name]
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_sessions([proc.pid], 5.0)
            code = -1
        with self._lock:
            self._procs.pop(name, None)
        if self._stopping.is_set():
            raise _Stopping
        if code != 0:
            raise StackSetupError(f"`{' '.join(cmd[:4])}` failed ({code}); see {self.log}:\n{_tail(self.log)}")

    def _postgres_env(self) -> dict[str, str]:
        """PostgreSQL's environment: none of Airflow's settings (no secret), its data folder."""
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "PGDATA": str(self.postgres_dir)}

    def _prepare_postgres_dir(self, account: pwd.struct_passwd | None) -> None:
        """The data folder, owned by the account PostgreSQL runs as and reachable by it."""
        socket_path = self.postgres_dir / f".s.PGSQL.{self.ports.postgres}"
        if len(str(socket_path)) > _SOCKET_PATH_MAX:
            raise StackSetupError(f"PostgreSQL's socket path {socket_path} is longer than {_SOCKET_PATH_MAX} bytes. "
                                  "Fix: use an Airflow home with a shorter path")
        self.postgres_dir.mkdir(mode=0o700, exist_ok=True)
        if account is None:
            return
        self.home.chmod(self.home.stat().st_mode | 0o001)  # PostgreSQL's account enters the home (not lists it)
        gids = {account.pw_gid, *os.getgrouplist(account.pw_name, account.pw_gid)}
        blocked = unreachable_folder(self.postgres_dir.parent, account.pw_uid, gids)
        if blocked is not None:
            raise StackSetupError(
                f"PostgreSQL runs as the `{account.pw_name}` user here (root cannot run it) and cannot enter {blocked} "
                f"(mode {blocked.stat().st_mode & 0o777:o}) on the way to {self.postgres_dir}. Fix: put the Airflow "
                "home under a folder others may enter (a test: under celery_airflow.enterable_temp_folder(), not "
                f"pytest's tmp_path), or `chmod o+x {blocked}`"
            )
        if self.postgres_dir.stat().st_uid != account.pw_uid:
            os.chown(self.postgres_dir, account.pw_uid, account.pw_gid)

    def _start_postgres(self) -> None:
        """Set up the data folder the first time (``initdb``, who may log in how), start the server, and make
        Airflow's role and database."""
        bindir, account = postgres_bindir(), postgres_account()
        self._prepare_postgres_dir(account)
        as_pg = {**_as_account(account), "cwd": str(self.postgres_dir)}
        if not (self.postgres_dir / "PG_VERSION").exists():
            self._run("initdb", [str(bindir / "initdb"), "-D", str(self.postgres_dir), "-U", PG_SUPERUSER,
                                 "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync"],
                      self._postgres_env(), 120, **as_pg)
        hba = self.postgres_dir / "pg_hba.conf"  # the superuser through the private socket; Airflow over TCP
        hba.write_text(f"local all {PG_SUPERUSER} trust\nhost {DB_NAME} {DB_USER} 127.0.0.1/32 scram-sha-256\n")
        if account is not None:
            os.chown(hba, account.pw_uid, account.pw_gid)
        settings = {"listen_addresses": "127.0.0.1", "port": self.ports.postgres,
                    "unix_socket_directories": self.postgres_dir, "unix_socket_permissions": "0700",
                    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": 200}
        cmd = [str(bindir / "postgres"), "-D", str(self.postgres_dir)]
        cmd += [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        self._spawn("postgres", cmd, self._postgres_env(), self.logs["postgres"], **as_pg)
        self._wait_for("PostgreSQL", "postgres", self._postgres_answers, 90)
        self._make_airflow_database()

    def _postgres_connection(self) -> Any:
        import psycopg2

        return psycopg2.connect(host=str(self.postgres_dir), port=self.ports.postgres, user=PG_SUPERUSER,
                                dbname="postgres", connect_timeout=3)

    def _postgres_answers(self) -> bool:
        try:
            self._postgres_connection().close()
            return True
        except Exception:
            return False

    def _make_airflow_database(self) -> None:
        """Airflow's role (its password from the secrets file, set anew each start) and database."""
        password = self._secrets.db_password
        conn = self._postgres_connection()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (DB_USER,))
                verb = "ALTER" if cur.fetchone() else "CREATE"
                cur.execute(f"{verb} ROLE {DB_USER} LOGIN PASSWORD %s", (password,))
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,))
                if not cur.fetchone():
                    cur.execute(f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}")
        finally:
            conn.close()

    def _start_redis(self) -> None:
        """Redis with its password in a config file of its own (0600), nothing saved to disk."""
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        conf = self.redis_dir / "redis.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"requirepass {self._secrets.redis_password}\n")
        cmd = [str(redis_server()), str(conf), "--port", str(self.ports.redis), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", str(self.redis_dir), "--daemonize", "no"]
        self._spawn("redis", cmd, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, self.logs["redis"],
                    cwd=str(self.redis_dir))
        self._wait_for("Redis", "redis", self._redis_answers, 30)

    def _redis_answers(self) -> bool:
        password = self._secrets.redis_password
        try:
            with socket.create_connection(("127.0.0.1", self.ports.redis), timeout=2) as conn:
                conn.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                answer = b""
                while answer.count(b"\r\n") < 2:
                    chunk = conn.recv(256)
                    if not chunk:
                        break
                    answer += chunk
            return answer.endswith(b"+PONG\r\n")
        except OSError:
            return False

    def _wait_for(self, what: str, name: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self._stopping.is_set():
                raise _Stopping
            self._raise_if_a_part_exited()
            if time.monotonic() > deadline:
                log = self.logs[name]
                raise StackSetupError(f"{what} did not answer within {timeout:.0f}s; see {log}:\n{_tail(log)}")
            time.sleep(0.3)

    def _migrate(self) -> None:
        self._run("migrate", [sys.executable, "-m", "airflow", "db", "migrate"], self.env, 600, cwd=str(self.home))

    def _start_parts(self) -> None:
        """The api-server, scheduler, DAG processor and triggerer, then each worker with its host's folders
        (made private: the provider refuses a lock folder others can write)."""
        commands = self.commands()
        for name in AIRFLOW_PARTS:
            self._spawn(name, commands[name], self.env, self.logs[name], cwd=str(self.home))
        for host in self.hosts:
            for folder in (host.tmp, host.locks):
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._spawn(host.name, commands[host.name], worker_env(self.env, host), host.log, cwd=str(host.folder))

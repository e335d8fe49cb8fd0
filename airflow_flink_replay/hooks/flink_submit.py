"""Submitting Python Flink jobs: one interface, two implementations (REST and CLI).

``FlinkJobSubmitter.submit(program, savepoint_path=..., allow_non_restored_state=..., parallelism=...,
job_name=...)`` returns a :class:`SubmittedJob` with the job id. Both implementations run the program
through Flink's ``PythonDriver``:

- :class:`RestPythonSubmitter` uploads ``opt/flink-python-*.jar`` once (an already uploaded one is reused)
  and calls ``POST /jars/{id}/run`` with ``entryClass=org.apache.flink.client.python.PythonDriver``. The
  program runs on the JobManager host (paths are JobManager paths). ~3-6 s. The run call is never resent
  once Flink may have received it (no idempotency key): a lost answer raises :class:`FlinkSubmissionError`
  saying the job may have started and where to look, instead of starting a second copy.
- :class:`CliPythonSubmitter` runs ``$FLINK_HOME/bin/flink run -d [-s SP] [-n] -py ... -pyfs ...`` with
  ``FLINK_CONF_DIR`` and ``JAVA_HOME`` set. ~12-15 s (JVM start); the program runs on this host.

A failing Python program makes Flink answer only "Python process exits with code: 1"; both submitters
raise :class:`FlinkSubmissionError` with the program's own traceback instead (from the JobManager log for
REST, from the CLI output for the CLI).

``run_check(program)`` runs the agent check's job-side program (:mod:`airflow_flink_replay.flink.agent_check`)
and returns the :class:`~airflow_flink_replay.core.agent_check.CheckFacts` it sends back: over REST in the job
graph of ``POST /jars/{id}/plan`` (nothing runs), with the CLI on the program's own output (no job submitted).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import re
import shlex
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypeVar

from airflow_flink_replay.core.agent_check import CheckFacts, decode_facts
from airflow_flink_replay.core.flink_models import FlinkPythonProgram, JobPlan, SubmittedJob
from airflow_flink_replay.core.replay_plans import VariantPlan, decode_plans
from airflow_flink_replay.exceptions import FlinkOutcomeUnknownError, FlinkRestError, FlinkSubmissionError
from airflow_flink_replay.hooks.flink_rest import PYTHON_DRIVER, FlinkRestHook
from airflow_flink_replay.hooks.flink_rest_base import flink_cause
from airflow_flink_replay.hooks.slot_admission import DEFAULT_CAPACITY_WAIT_S, SlotAdmission
from airflow_flink_replay.hooks.submission_lease import SharedSubmissionLease

SubmitterKind = Literal["rest", "cli"]
T = TypeVar("T")
_JOB_ID = re.compile(r"JobID ([0-9a-f]{32})")
_LOG_PREFIX = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ +\w+ +org\.apache\.flink\.client\.python\.PythonDriver +\[\] - "
)
#: Two PythonDriver runs at the same time in one JobManager collide on a static gateway (Flink limitation).
_CONCURRENT_DRIVER = "PythonEnvUtils.setGatewayServer"
#: What Flink answers when a concurrent PythonDriver run took this program's job (the context environment
#: is static in the JobManager): the program ran, but its ``execute()`` went through the other request.
_TAKEN_BY_ANOTHER_RUN = ("no jobs included in application", "the program aborted pre-maturely")


def _concurrent_driver(details: str) -> bool:
    """Another PythonDriver run held the JobManager's gateway or took this program's job.

    Flink gives three answers for it: ``IllegalArgumentException`` at ``PythonEnvUtils.setGatewayServer``
    (or, without frames, ``The main method caused an error: null``), "No jobs included in application"
    (``/run``) and "The program plan could not be fetched - the program aborted pre-maturely" (``/plan``).
    A program that failed on its own says "Python process exits with code" instead and is not retried.
    """
    if _CONCURRENT_DRIVER in details:
        return True
    lowered = details.lower()
    if "python process exits with code" not in lowered and any(t in lowered for t in _TAKEN_BY_ANOTHER_RUN):
        return True
    lines = [line.strip() for line in details.splitlines() if line.strip()]
    return (
        bool(lines)
        and lines[-1].endswith("java.lang.IllegalArgumentException")
        and ("The main method caused an error: null" in details)
    )


def _job_may_run_elsewhere(details: str) -> bool:
    """The program ran and called ``execute()``, but another request's environment may have submitted it."""
    return any(t in details.lower() for t in _TAKEN_BY_ANOTHER_RUN)


class PythonDriverLock:
    """One PythonDriver run at a time per JobManager, across every process on this host.

    A JobManager runs Python programs through a static gateway and a static context environment: two
    ``/jars/{id}/run`` or ``/jars/{id}/plan`` calls at the same time fail, or worse, one request submits
    the other's job. Airflow runs the replay tasks in parallel (LocalExecutor: processes on one host), so
    the submitters take an exclusive ``flock`` on a file named after the REST URL before each call.
    Submitters on other hosts are not covered: for several Airflow hosts the Flink connection names a shared
    folder (``submission_lease_uri``) and :class:`~airflow_flink_replay.hooks.submission_lease.SharedSubmissionLease`
    takes this lock's place.

    :param base_url: the JobManager's REST URL (the lock's key).
    :param lock_dir: where the lock files live (default ``$FLINK_REPLAY_LOCK_DIR`` or
        ``<temp folder>/flink-replay-locks-<uid>``). The folder is private to this user: created 0700, refused
        when it is a symlink, someone else's, or writable by group or others (anyone who can write it could
        hold every submission's lock, or plant a link at a lock file's name).
    """

    def __init__(self, base_url: str, lock_dir: str | Path | None = None) -> None:
        default = Path(tempfile.gettempdir(), f"flink-replay-locks-{os.getuid()}")
        folder = _private_folder(Path(lock_dir or os.environ.get("FLINK_REPLAY_LOCK_DIR") or default))
        digest = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]
        self.path = folder / f"python-driver-{digest}.lock"
        self.base_url = base_url

    @contextlib.contextmanager
    def hold(self, timeout: float) -> Iterator[float]:
        """Hold the lock; yields the seconds waited. Raises :class:`FlinkSubmissionError` after ``timeout``."""
        started = time.monotonic()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "a+") as handle:
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - started > timeout:
                        raise FlinkSubmissionError(
                            f"another Python program has been running on the JobManager at {self.base_url} for "
                            f"more than {timeout:g} s (lock {self.path}): submissions queue behind it. "
                            "Fix: look for a hung PythonDriver in the JobManager log, or raise the timeout"
                        ) from None
                    time.sleep(0.2)
            try:
                yield time.monotonic() - started
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _several_hosts_executor() -> str | None:
    """The configured executor(s) when one of them runs tasks on several hosts (Celery, Kubernetes, Edge), else
    None (the LocalExecutor; no Airflow configuration at all)."""
    try:
        from airflow.configuration import conf

        executors = str(conf.get("core", "executor", fallback="") or "")
    except Exception:  # a script without Airflow's configuration
        return None
    spread = [e.strip() for e in executors.split(",") if any(k in e for k in ("Celery", "Kubernetes", "Edge"))]
    return ", ".join(spread) or None


def _private_folder(folder: Path) -> Path:
    """``folder`` created 0700 if missing; refused (:class:`FlinkSubmissionError`) unless it is a directory of
    this user that group and others cannot write."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    st = folder.lstat()
    problem = (
        "is a symlink" if folder.is_symlink()
        else "is not a directory" if not folder.is_dir()
        else f"belongs to uid {st.st_uid}, not to this user ({os.getuid()})" if st.st_uid != os.getuid()
        else f"is writable by group or others (mode {st.st_mode & 0o777:o})" if st.st_mode & 0o022
        else ""
    )  # fmt: skip
    if problem:
        raise FlinkSubmissionError(
            f"the submission lock folder {folder} {problem}: anyone who can write it can hold or replace the "
            f"submissions' locks. Fix: remove it (it is created again, private to this user), or set "
            f"FLINK_REPLAY_LOCK_DIR to a folder only this user can write"
        )
    return folder


_JAVA_FRAME = re.compile(r"^\s+(at \S+\(.*\)$|\.\.\. \d+ more)")


class FlinkJobSubmitter(ABC):
    """Submits a :class:`FlinkPythonProgram`, optionally restoring a savepoint."""

    kind: str = ""

    @abstractmethod
    def submit(
        self,
        program: FlinkPythonProgram,
        *,
        savepoint_path: str | None = None,
        allow_non_restored_state: bool = False,
        parallelism: int | None = None,
        job_name: str | None = None,
        timeout: float = 180.0,
        slots: int = 0,
        capacity_timeout: float = DEFAULT_CAPACITY_WAIT_S,
    ) -> SubmittedJob:
        """Submit ``program`` (detached) and return its job id.

        :param savepoint_path: restore from this savepoint (``-s`` / ``savepointPath``).
        :param allow_non_restored_state: skip savepoint state that maps to no operator (``-n``).
        :param parallelism: overrides ``program.parallelism``.
        :param job_name: overrides ``program.job_name`` (``pipeline.name``; a name the program passes to
            ``env.execute()`` wins).
        :param timeout: seconds the submission itself may take.
        :param slots: task slots the program's jobs take; >0 admits the submission only when that many are free
            (:class:`~airflow_flink_replay.hooks.slot_admission.SlotAdmission`), waiting for them up to
            ``capacity_timeout`` seconds.
        """

    def run_check(self, program: FlinkPythonProgram, *, timeout: float = 180.0) -> CheckFacts:
        """Run the agent check's job-side program and return the facts it sends back (see the module doc)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run the agent check")

    @staticmethod
    def _effective(program: FlinkPythonProgram, parallelism: int | None, job_name: str | None) -> FlinkPythonProgram:
        update: dict[str, object] = {}
        if parallelism is not None:
            update["parallelism"] = parallelism
        if job_name is not None:
            update["job_name"] = job_name
        return program.model_copy(update=update) if update else program


def python_traceback_from_log(log: str, program: FlinkPythonProgram) -> str:
    """The Python output of the newest PythonDriver run of ``program`` in a JobManager log.

    The driver logs the command line, then every line the Python process printed; we take the block
    after the last command line that names this program and keep it from its last ``Traceback``.
    """
    lines = log.splitlines()
    marker = program.entry_point or str(program.module)
    args_text = " ".join(program.program_args)
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if "command:" in lines[i] and marker in lines[i] and args_text in lines[i]:
            start = i
            break
    if start is None:
        return ""
    output: list[str] = []
    for line in lines[start + 1 :]:
        if "Python Process Exited" in line:
            break
        if _LOG_PREFIX.match(line):
            text = _LOG_PREFIX.sub("", line)
            if "Python Process Started" not in text:
                output.append(text)
    last_tb = max((i for i, ln in enumerate(output) if ln.startswith("Traceback")), default=None)
    picked = output[last_tb:] if last_tb is not None else output[-30:]
    picked = [ln for ln in picked if not _JAVA_FRAME.match(ln)]  # py4j errors carry Java stack frames
    return "\n".join(picked[-150:])  # a refusal carries every variant's identity report


def program_failure_cause(text: str) -> str:
    """The most telling line of a failed program's output: the innermost Java ``Caused by:`` (e.g.
    "Cannot map checkpoint/savepoint state ...") when the failure came from Flink through py4j, else the
    Python exception line."""
    kept: list[str] = []
    for line in text.splitlines():
        if "ProgramAbortException" in line or "Python process exits with code" in line:
            break  # the driver's own wrapper follows the program's output
        if not line.startswith("SLF4J:"):  # a JVM's logging diagnostics (e.g. two bindings in lib/), not the error
            kept.append(line)
    text = "\n".join(kept)
    java = [ln.strip().removeprefix("Caused by:").strip() for ln in kept if ln.strip().startswith("Caused by:")]
    if java:
        return java[-1]
    return _python_error_line(text)


def _python_error_line(traceback_text: str) -> str:
    """The final ``SomeError: message`` line of a traceback (or its last line)."""
    lines = [ln for ln in traceback_text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*", line) or re.match(r"^[\w.]+: ", line):
            return line.strip()
    return lines[-1].strip() if lines else ""


class RestPythonSubmitter(FlinkJobSubmitter):
    """Submits through ``/jars/{id}/run`` with the PythonDriver (the program runs on the JobManager host).

    Every PythonDriver call (run and plan) holds the JobManager's submission lock (:meth:`lock`: a lease in the
    connection's ``submission_lease_uri`` when set, every host's; else a :class:`PythonDriverLock` on this
    host), is refused while the JobManager's free metaspace is below ``min_metaspace_headroom_mb`` (a full
    metaspace kills the JobManager and every job on it), and is retried with jitter when a concurrent run
    collided with it all the same. A submission that asks for ``slots`` is admitted only when the cluster has
    them free, and keeps the lock until its jobs hold them.

    :param hook: the Flink REST hook.
    :param python_jar: local path of ``flink-python-*.jar`` to upload when the cluster has none
        (default: the connection's ``python_jar``, else ``<flink_home>/opt/flink-python-*.jar``).
    :param flink_home: where to look for the jar when ``python_jar`` is not given (default: the
        connection's ``flink_home``, else ``$FLINK_HOME``).
    :param concurrent_retries: retries when another PythonDriver run held the JobManager.
    :param lock_dir: where the per-JobManager lock files live (see :class:`PythonDriverLock`).
    :param min_metaspace_headroom_mb: refuse to run a Python program while the JobManager has less free
        metaspace (default: the connection's ``min_metaspace_headroom_mb``, 96 MB; 0 disables the check).
    """

    kind = "rest"
    _upload_lock = threading.Lock()
    #: flink-python jar id per REST base URL (refreshed when the cluster no longer has it).
    _jar_ids: dict[str, str] = {}

    def __init__(
        self,
        hook: FlinkRestHook,
        *,
        python_jar: str | None = None,
        flink_home: str | None = None,
        concurrent_retries: int = 10,
        lock_dir: str | Path | None = None,
        min_metaspace_headroom_mb: float | None = None,
    ) -> None:
        self.hook = hook
        self.python_jar = python_jar
        self.flink_home = flink_home
        self.concurrent_retries = concurrent_retries
        self.lock_dir = lock_dir
        self.min_metaspace_headroom_mb = min_metaspace_headroom_mb
        self._lease_warning_checked = False

    def lock(self) -> PythonDriverLock | SharedSubmissionLease:
        """The JobManager's submission lock: the shared lease when the connection names ``submission_lease_uri``,
        else this host's ``flock`` (made for each call: its folder is checked each time)."""
        if uri := self.hook.settings.submission_lease_uri:
            return SharedSubmissionLease(self.hook.base_url, uri)
        self._warn_once_without_lease()
        return PythonDriverLock(self.hook.base_url, self.lock_dir)

    def _warn_once_without_lease(self) -> None:
        """Log, once per submitter (not at every call and retry), that this host's lock does not cover other hosts
        when Airflow's executor spreads tasks over several."""
        if self._lease_warning_checked:
            return
        self._lease_warning_checked = True
        if executor := _several_hosts_executor():
            self.hook.log.warning(
                "Airflow runs the %s, whose workers may be on several hosts, but connection %r names no "
                "submission_lease_uri: this host's lock does not keep other hosts' Python programs off the "
                "JobManager at %s (two at once collide, and can leave it unable to run any until it restarts). "
                "Fix: set submission_lease_uri in the connection's extra to a folder every worker reaches; see "
                "docs/real-cluster.md#several-airflow-hosts-celery-kubernetes-executors",
                executor, self.hook.flink_conn_id, self.hook.base_url)  # fmt: skip

    def _local_python_jar(self) -> Path:
        settings = self.hook.settings
        if jar := self.python_jar or settings.python_jar:
            return Path(jar)
        home = self.flink_home or settings.flink_home or os.environ.get("FLINK_HOME")
        if home:
            found = sorted(Path(home, "opt").glob("flink-python-*.jar")) or sorted(
                Path(home, "lib").glob("flink-python-*.jar")
            )
            if found:
                return found[-1]
        raise FlinkSubmissionError(
            f"REST submission needs the flink-python jar: the cluster at {self.hook.base_url} has none uploaded "
            "and no local copy was found. Fix: set python_jar (a path to flink-python-*.jar on this worker) or "
            f"flink_home in the extra of connection {self.hook.flink_conn_id!r}, or upload the jar once "
            "(POST /jars/upload)"
        )

    def python_jar_id(self, *, refresh: bool = False) -> str:
        """The id of an uploaded flink-python jar; uploads it once if the cluster has none."""
        with self._upload_lock:
            base = self.hook.base_url
            if not refresh and base in self._jar_ids:
                return self._jar_ids[base]
            jars = [j for j in self.hook.list_jars() if j.name.startswith("flink-python")]
            jar_id = max(jars, key=lambda j: j.uploaded).id if jars else self.hook.upload_jar(self._local_python_jar())
            self._jar_ids[base] = jar_id
            return jar_id

    def submit(
        self,
        program: FlinkPythonProgram,
        *,
        savepoint_path: str | None = None,
        allow_non_restored_state: bool = False,
        parallelism: int | None = None,
        job_name: str | None = None,
        timeout: float = 180.0,
        slots: int = 0,
        capacity_timeout: float = DEFAULT_CAPACITY_WAIT_S,
    ) -> SubmittedJob:
        """Submit through ``/jars/{id}/run``; see :meth:`FlinkJobSubmitter.submit`."""
        program = self._effective(program, parallelism, job_name)
        if program.env:
            raise FlinkSubmissionError(
                "FlinkPythonProgram.env is not supported by REST submission: the program runs inside the "
                "JobManager's environment. Use flink_config, program_args, or the CLI submitter"
            )
        started = time.monotonic()
        submitted_at = datetime.now(UTC)
        admission = SlotAdmission(self.hook, slots, timeout=capacity_timeout)
        waits: dict[str, float] = {}
        try:
            job_id = self._driver_call(
                lambda jar_id: self.hook.run_jar(
                    jar_id,
                    entry_class=PYTHON_DRIVER,
                    program_args=program.driver_args(),
                    savepoint_path=savepoint_path,
                    allow_non_restored_state=allow_non_restored_state,
                    parallelism=program.parallelism,
                    flink_configuration=program.configuration(),
                    timeout=timeout,
                ),
                timeout,
                taken_job=lambda: self._job_started_elsewhere(program.job_name, submitted_at),
                admission=admission,
                waits=waits,
            )
        except FlinkRestError as err:
            raise self._explain(err, program, savepoint_path) from err
        return SubmittedJob(
            job_id=job_id,
            submitter=self.kind,
            submitted_at=submitted_at,
            savepoint_path=savepoint_path,
            allow_non_restored_state=allow_non_restored_state,
            seconds=round(time.monotonic() - started, 3),
            lock_wait_s=round(waits.get("lock", 0.0), 3),
            capacity_wait_s=round(admission.waited_s, 3),
            slots=slots,
        )

    def plan(self, program: FlinkPythonProgram, *, timeout: float = 180.0) -> JobPlan:
        """The job graph ``program`` would submit (``POST /jars/{id}/plan``), without running it."""
        try:
            return self._driver_call(
                lambda jar_id: self.hook.jar_plan(
                    jar_id,
                    entry_class=PYTHON_DRIVER,
                    program_args=program.driver_args(),
                    flink_configuration=program.configuration(),
                ),
                timeout,
            )
        except FlinkRestError as err:
            raise self._explain(err, program, None, action="Planning") from err

    def run_check(self, program: FlinkPythonProgram, *, timeout: float = 180.0) -> CheckFacts:
        """The facts of the agent check (``program`` run with ``--emit plan``): carried in the name of the only
        operator of the job graph ``/plan`` returns; nothing is submitted. A program that failed before it
        could report raises :class:`FlinkSubmissionError` with its traceback (:meth:`plan`)."""
        return self._carried(program, decode_facts, "the agent check", timeout)

    def plan_replays(self, program: FlinkPythonProgram, *, timeout: float = 180.0) -> list[VariantPlan]:
        """The job graphs of the replay variants (``program``: ``airflow_flink_replay.flink.replay_plans``),
        carried in the name of the only operator of the job graph ``/plan`` returns; nothing is submitted."""
        return self._carried(program, decode_plans, "the replay plans", timeout)

    def _carried(self, program: FlinkPythonProgram, decode: Callable[[str], T | None], what: str, timeout: float) -> T:
        """What ``program`` sends back through its ``/plan`` job graph (:mod:`~airflow_flink_replay.core.carrier`)."""
        plan = self.plan(program, timeout=timeout)
        found = decode("\n".join(f"{n.operator}\n{n.description}" for n in plan.nodes))
        if found is None:
            raise FlinkSubmissionError(
                f"{what} program {program.entry_point or program.module} on {self.hook.base_url} returned a plan "
                "without its report: is the cluster's airflow-flink-replay the same version as this worker's?"
            )
        return found

    def check_metaspace(self) -> None:
        """Refuse to run a Python program on a JobManager whose metaspace is nearly full.

        Each PythonDriver run leaves classes in the JobManager's metaspace (see docs/real-cluster.md,
        "JobManager metaspace"); at the limit the JobManager exits with ``OutOfMemoryError: Metaspace``
        and takes every job it runs with it — production's too, when replays share its cluster. A refused
        replay costs a rerun; a dead JobManager costs production.
        """
        memory = self.hook.metaspace_short(self.min_metaspace_headroom_mb)
        if memory is not None:
            headroom = self.min_metaspace_headroom_mb or self.hook.settings.min_metaspace_headroom_mb
            raise FlinkSubmissionError(
                f"the JobManager at {self.hook.base_url} has {memory.metaspace_free_mb:.0f} MB of metaspace left "
                f"({memory.metaspace_used / 2**20:.0f} of {memory.metaspace_max / 2**20:.0f} MB used), less than "
                f"the {headroom:g} MB a Python submission needs: another one could kill it (OutOfMemoryError: "
                "Metaspace) with every job it runs. Nothing was submitted. Fix: restart this cluster's "
                "JobManager when no job needs it (the local stack: `flink-replay stack recycle-replay`), run "
                "replays on a cluster of their own (replay_flink_conn_id), or raise "
                "jobmanager.memory.jvm-metaspace.size; see docs/real-cluster.md#jobmanager-metaspace"
            )

    def _job_started_elsewhere(self, job_name: str | None, since: datetime) -> str | None:
        """The id of a job named ``job_name`` started since ``since`` (a concurrent run took it), if any."""
        if not job_name:
            return None
        floor = since.timestamp() * 1000 - 1000
        deadline = time.monotonic() + 10  # the other request may still be submitting it
        while True:
            jobs = [j for j in self.hook.list_jobs().jobs if j.name == job_name and j.start_time >= floor]
            if jobs:
                return max(jobs, key=lambda j: j.start_time).jid
            if time.monotonic() > deadline:
                return None
            time.sleep(1.0)

    def _driver_call(
        self,
        call: Callable[[str], T],
        timeout: float,
        taken_job: Callable[[], str | None] | None = None,
        *,
        admission: SlotAdmission | None = None,
        waits: dict[str, float] | None = None,
    ) -> T:
        """Run a PythonDriver REST call with the uploaded flink-python jar's id.

        Holds the JobManager's submission lock (:meth:`lock`) and checks its metaspace first; with
        ``admission``, calls only when the cluster has its slots free (else frees the lock, waits for them and
        tries again) and keeps the lock until the new jobs hold their slots. Re-uploads once when someone
        deleted the shared jar. When another run collided with this one all the same (one PythonDriver at a
        time per JobManager), it waits with jitter and tries again until ``timeout`` — but a ``/run`` whose job
        another request may have submitted is first looked up by its name (``taken_job``) and reattached
        instead of submitted twice. ``waits["lock"]``: the seconds waited for the lock.
        """
        started = time.monotonic()
        jar_id = self.python_jar_id()
        attempt = refreshed = 0
        waits = {} if waits is None else waits
        while True:
            try:
                with self.lock().hold(timeout) as waited:
                    waits["lock"] = waits.get("lock", 0.0) + waited
                    self.check_metaspace()
                    if admission is None or admission.room():
                        result = call(jar_id)
                        if admission is not None:
                            admission.settle()
                        return result
                assert admission is not None
                admission.wait_for_room()  # no room: wait outside the lock, then take it again
                continue
            except FlinkOutcomeUnknownError:
                raise  # sent, no answer: Flink may have started the job, never submit it again here
            except FlinkRestError as err:
                details = err.details or str(err)
                lowered = details.lower()
                missing = err.status_code == 404 or "could not find jar" in lowered or "jar file" in lowered
                if missing and not refreshed:
                    jar_id, refreshed = self.python_jar_id(refresh=True), 1
                elif _concurrent_driver(details) and (
                    attempt < self.concurrent_retries or time.monotonic() - started < timeout
                ):
                    if taken_job is not None and _job_may_run_elsewhere(details) and (found := taken_job()):
                        self.hook.log.warning("a concurrent Python run submitted this job as %s: reattaching", found)
                        return found  # type: ignore[return-value]  # a run call returns the job id
                    self.hook.log.info("another Python program ran on the JobManager (%s): retrying", details[:120])
                    time.sleep(random.uniform(0.5, 2.5))
                else:
                    raise
                attempt += 1

    def _explain(
        self, err: FlinkRestError, program: FlinkPythonProgram, savepoint_path: str | None, action: str = "Submitting"
    ) -> FlinkSubmissionError:
        """Replace "Python process exits with code: 1" by the program's traceback from the JM log."""
        where = f" from savepoint {savepoint_path}" if savepoint_path else ""
        if isinstance(err, FlinkOutcomeUnknownError):
            return FlinkSubmissionError(
                f"{action} {program.entry_point or program.module}{where} over REST: outcome unknown. {err}",
                cause=err.cause or str(err),
                output=err.details or "",
            )
        cause = err.cause or str(err)
        traceback_text = ""
        if "Python process exits" in (err.details or cause):
            traceback_text = python_traceback_from_log(self.hook.jobmanager_log_tail(20000), program)
            if traceback_text:
                cause = program_failure_cause(traceback_text) or cause
        message = f"{action} {program.entry_point or program.module}{where} over REST failed: {cause}"
        if traceback_text:
            message += f"\n--- Python output (JobManager log) ---\n{traceback_text}"
        elif "Python process exits" in (err.details or cause):
            message += (
                "\n(the program's own output was not found in the last 20000 lines of the JobManager log; "
                "look there for its command line, or submit with the CLI submitter to see it directly)"
            )
        elif err.cause and err.cause != cause:
            message += f"\n{err.cause}"
        return FlinkSubmissionError(message, cause=cause, output=traceback_text or (err.details or ""))


class CliPythonSubmitter(FlinkJobSubmitter):
    """Submits with ``$FLINK_HOME/bin/flink run -d`` (the program runs on this host).

    :param flink_home: Flink distribution (for the wheel: ``site-packages/pyflink``).
    :param flink_conf_dir: the client's configuration (REST address, python.client.executable).
    :param java_home: the JDK for the client JVM.
    :param env: extra environment for the client.
    :param hook: the cluster's REST hook (slot admission), optional.
    """

    kind = "cli"

    def __init__(
        self,
        flink_home: str,
        *,
        flink_conf_dir: str | None = None,
        java_home: str | None = None,
        env: dict[str, str] | None = None,
        hook: FlinkRestHook | None = None,
    ) -> None:
        self.hook = hook
        self.flink_home = flink_home
        self.flink_conf_dir = flink_conf_dir
        self.java_home = java_home
        self.env = dict(env or {})

    def _client_env(self, program: FlinkPythonProgram) -> dict[str, str]:
        """The ``flink`` client's environment: this process's, the Flink paths, then the program's own."""
        env = {**os.environ, "FLINK_HOME": self.flink_home, **self.env, **program.env}
        if self.flink_conf_dir:
            env["FLINK_CONF_DIR"] = self.flink_conf_dir
        if self.java_home:
            env["JAVA_HOME"] = self.java_home
        return env

    def command(
        self,
        program: FlinkPythonProgram,
        savepoint_path: str | None = None,
        allow_non_restored_state: bool = False,
    ) -> list[str]:
        """The ``flink run`` command line."""
        cmd = [str(Path(self.flink_home, "bin", "flink")), "run", "-d"]
        if savepoint_path:
            cmd += ["-s", savepoint_path]
            if allow_non_restored_state:
                cmd.append("-n")
        if program.parallelism:
            cmd += ["-p", str(program.parallelism)]
        for key, value in program.configuration().items():
            if key != "parallelism.default":
                cmd.append(f"-D{key}={value}")
        return cmd + program.driver_args()

    def submit(
        self,
        program: FlinkPythonProgram,
        *,
        savepoint_path: str | None = None,
        allow_non_restored_state: bool = False,
        parallelism: int | None = None,
        job_name: str | None = None,
        timeout: float = 180.0,
        slots: int = 0,
        capacity_timeout: float = DEFAULT_CAPACITY_WAIT_S,
    ) -> SubmittedJob:
        """Run ``flink run -d``; see :meth:`FlinkJobSubmitter.submit`. ``slots`` needs ``hook`` (the cluster's REST
        API): the submission waits for that many free slots first (the CLI holds no lock: two hosts may both see
        the same free slots)."""
        program = self._effective(program, parallelism, job_name)
        env = self._client_env(program)
        cmd = self.command(program, savepoint_path, allow_non_restored_state)
        admission = SlotAdmission(self.hook, slots, timeout=capacity_timeout) if self.hook and slots else None
        if admission is not None and not admission.room():
            admission.wait_for_room()
        started = time.monotonic()
        submitted_at = datetime.now(UTC)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as err:
            raise FlinkSubmissionError(f"`flink run` did not finish within {timeout:g} s: {shlex.join(cmd)}") from err
        output = (proc.stdout or "") + (proc.stderr or "")
        match = _JOB_ID.search(output)
        if proc.returncode != 0 or not match:
            cause = _cli_cause(output)
            raise FlinkSubmissionError(
                f"`flink run` of {program.entry_point or program.module} failed (exit {proc.returncode}): {cause}\n"
                f"--- output tail ---\n" + "\n".join(output.splitlines()[-40:]),
                cause=cause,
                output=output,
            )
        return SubmittedJob(
            job_id=match.group(1),
            submitter=self.kind,
            submitted_at=submitted_at,
            savepoint_path=savepoint_path,
            allow_non_restored_state=allow_non_restored_state,
            seconds=round(time.monotonic() - started, 3),
            capacity_wait_s=round(admission.waited_s, 3) if admission else 0.0,
            slots=slots if admission else 0,
        )

    def run_check(self, program: FlinkPythonProgram, *, timeout: float = 180.0) -> CheckFacts:
        """The facts of the agent check (``program`` run with ``--emit stdout``): ``flink run`` runs it on this
        host, it prints them and submits no job. Raises :class:`FlinkSubmissionError` with the program's output
        when it failed before it could report."""
        env = self._client_env(program)
        cmd = self.command(program)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as err:
            message = f"the agent check did not finish within {timeout:g} s: {shlex.join(cmd)}"
            raise FlinkSubmissionError(message) from err
        output = (proc.stdout or "") + (proc.stderr or "")
        facts = decode_facts(output)
        if facts is None:
            cause = _cli_cause(output)
            raise FlinkSubmissionError(
                f"the agent check {program.entry_point or program.module} failed (exit {proc.returncode}): {cause}\n"
                "--- output tail ---\n" + "\n".join(output.splitlines()[-40:]),
                cause=cause,
                output=output,
            )
        return facts


def _cli_cause(output: str) -> str:
    """The most telling line of ``flink run`` output: a Python error line, else the innermost Java cause."""
    tb = [i for i, ln in enumerate(output.splitlines()) if ln.startswith("Traceback")]
    if tb:
        line = program_failure_cause("\n".join(output.splitlines()[tb[-1] :]))
        if line:
            return line
    summary = flink_cause(output).splitlines()
    return summary[-1].removeprefix("Caused by:").strip() if summary else "no output"


def get_submitter(
    kind: SubmitterKind,
    hook: FlinkRestHook,
    *,
    flink_home: str | None = None,
    flink_conf_dir: str | None = None,
    java_home: str | None = None,
    python_jar: str | None = None,
) -> FlinkJobSubmitter:
    """Build a submitter for the cluster behind ``hook``.

    Paths not given come from the Flink connection's extra (``flink_home``, ``flink_conf_dir``,
    ``java_home``, ``python_jar``) — what the local stack writes into ``connections.json`` — never from
    files lying around the working directory.
    """
    settings = hook.settings
    if kind == "rest":
        return RestPythonSubmitter(hook, python_jar=python_jar, flink_home=flink_home)
    if kind == "cli":
        home = flink_home or settings.flink_home or os.environ.get("FLINK_HOME")
        if not home:
            raise FlinkSubmissionError(
                "CLI submission needs a Flink distribution with bin/flink on this worker. Fix: set flink_home "
                f"in the extra of connection {hook.flink_conn_id!r} (or FLINK_HOME)"
            )
        return CliPythonSubmitter(
            home,
            flink_conf_dir=flink_conf_dir or settings.flink_conf_dir,
            java_home=java_home or settings.java_home,
            hook=hook,
        )
    raise ValueError(f"submitter must be 'rest' or 'cli', got {kind!r}")

"""Typed results of the Flink REST API and the control plane's XCom results (pure pydantic).

The REST models parse Flink 2.x responses (extra fields are ignored, so newer Flink versions parse too).
``QuiesceResult`` and ``ResumeResult`` are what the quiesce / resume operators push to XCom (as plain
dicts from ``model_dump(mode="json")``); ``FlinkPythonProgram`` describes how to (re)submit a Python job.

This module imports neither Airflow nor PyFlink: it runs on both sides (pydantic 2.11 and 2.14).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Substring of the Flink Agents operator's name in a job graph vertex.
AGENT_OPERATOR_NAME = "action-execute-operator"
#: Job states after which a job never runs again.
TERMINAL_STATES = frozenset({"FINISHED", "FAILED", "CANCELED", "SUSPENDED"})
#: Job states of a job that runs or is about to (a second one with production's name is a second copy).
LIVE_STATES = frozenset({"INITIALIZING", "CREATED", "RUNNING", "RESTARTING", "RECONCILING"})
QuiesceMode = Literal["drain", "stop", "savepoint"]
SavepointFormat = Literal["CANONICAL", "NATIVE"]


class _FlinkModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


# --------------------------------------------------------------------------------------------- REST


class ClusterOverview(_FlinkModel):
    """``GET /overview``."""

    taskmanagers: int
    slots_total: int = Field(alias="slots-total")
    slots_available: int = Field(alias="slots-available")
    jobs_running: int = Field(alias="jobs-running")
    jobs_finished: int = Field(0, alias="jobs-finished")
    jobs_cancelled: int = Field(0, alias="jobs-cancelled")
    jobs_failed: int = Field(0, alias="jobs-failed")
    flink_version: str = Field("", alias="flink-version")
    flink_commit: str = Field("", alias="flink-commit")


class JobManagerMemory(_FlinkModel):
    """The JobManager JVM's memory from ``GET /jobmanager/metrics`` (bytes; 0 when not reported)."""

    #: field -> Flink metric name
    METRICS: ClassVar[dict[str, str]] = {
        "metaspace_used": "Status.JVM.Memory.Metaspace.Used",
        "metaspace_max": "Status.JVM.Memory.Metaspace.Max",
        "heap_used": "Status.JVM.Memory.Heap.Used",
        "heap_max": "Status.JVM.Memory.Heap.Max",
        "classes_loaded": "Status.JVM.ClassLoader.ClassesLoaded",
        "classes_unloaded": "Status.JVM.ClassLoader.ClassesUnloaded",
    }

    metaspace_used: float = 0.0
    metaspace_max: float = 0.0
    heap_used: float = 0.0
    heap_max: float = 0.0
    classes_loaded: float = 0.0
    classes_unloaded: float = 0.0

    @property
    def metaspace_free_mb(self) -> float | None:
        """Free metaspace in MB; None when the JobManager reports no limit."""
        if self.metaspace_max <= 0:
            return None
        return (self.metaspace_max - self.metaspace_used) / 2**20


class JobOverview(_FlinkModel):
    """One entry of ``GET /jobs/overview``."""

    jid: str
    name: str
    state: str
    start_time: int = Field(alias="start-time")
    end_time: int = Field(-1, alias="end-time")
    duration: int = 0
    tasks: dict[str, int] = Field(default_factory=dict, description="subtasks per state (lower-case state names)")


class JobsOverview(_FlinkModel):
    """``GET /jobs/overview``."""

    jobs: list[JobOverview] = Field(default_factory=list)

    def by_name(self, name: str, states: frozenset[str] | None = None) -> list[JobOverview]:
        """Jobs called ``name`` (optionally only in ``states``), newest first."""
        found = [j for j in self.jobs if j.name == name and (states is None or j.state in states)]
        return sorted(found, key=lambda j: j.start_time, reverse=True)


class JobVertex(_FlinkModel):
    """A vertex of ``GET /jobs/{id}`` (a chain of operators, one task)."""

    id: str
    name: str
    parallelism: int
    max_parallelism: int | None = Field(None, alias="maxParallelism")
    status: str = ""
    start_time: int = Field(-1, alias="start-time")
    tasks: dict[str, int] = Field(default_factory=dict, description="subtasks per state")

    @property
    def processing(self) -> bool:
        """Whether any subtask RUNS (or already FINISHED): only then can it have processed records."""
        return self.status in ("RUNNING", "FINISHED") or bool(self.tasks.get("RUNNING") or self.tasks.get("FINISHED"))


class JobDetails(_FlinkModel):
    """``GET /jobs/{id}``: state, timestamps per state and vertices."""

    jid: str
    name: str
    state: str
    start_time: int = Field(alias="start-time")
    end_time: int = Field(-1, alias="end-time")
    max_parallelism: int | None = Field(None, alias="maxParallelism")
    timestamps: dict[str, int] = Field(default_factory=dict)
    vertices: list[JobVertex] = Field(default_factory=list)

    @property
    def all_vertices_running(self) -> bool:
        """True when every vertex (task) is RUNNING, i.e. the job processes records again."""
        return bool(self.vertices) and all(v.status == "RUNNING" for v in self.vertices)


class PlanInput(_FlinkModel):
    """An edge of the job plan."""

    id: str
    ship_strategy: str = ""


class PlanNode(_FlinkModel):
    """A node of ``GET /jobs/{id}/plan``."""

    id: str
    parallelism: int
    description: str = ""
    operator: str = ""
    inputs: list[PlanInput] = Field(default_factory=list)


class JobPlan(_FlinkModel):
    """``GET /jobs/{id}/plan`` (the ``plan`` object)."""

    jid: str
    name: str
    type: str = ""
    nodes: list[PlanNode] = Field(default_factory=list)


class ExceptionEntry(_FlinkModel):
    """One entry of the 2.x ``exceptionHistory``."""

    exception_name: str = Field("", alias="exceptionName")
    stacktrace: str = ""
    timestamp: int = 0
    task_name: str | None = Field(None, alias="taskName")

    @property
    def headline(self) -> str:
        """The first line of the stack trace (``Class: message``)."""
        return (self.stacktrace.strip().splitlines() or [self.exception_name])[0]

    @property
    def root_cause(self) -> str:
        """The Python exception of a Python worker's failure (its last line: ``Type: message``), else the last
        ``Caused by:`` line of the stack trace, or the headline."""
        python = python_traceback(self.stacktrace)
        if python:
            return python_exception_line(python)
        causes = [ln.strip() for ln in self.stacktrace.splitlines() if ln.strip().startswith("Caused by:")]
        return causes[-1].removeprefix("Caused by:").strip() if causes else self.headline

    @property
    def python_error(self) -> str:
        """The Python traceback this failure carries (:func:`python_traceback`), or ``""``."""
        return python_traceback(self.stacktrace)


#: Where a Python traceback starts inside a Java stack trace (a Python worker's error: "Error received from SDK
#: harness for instruction 1: Traceback (most recent call last): ...").
PYTHON_TRACEBACK = "Traceback (most recent call last):"
#: Frames of the Python worker's own machinery (Beam's harness, PyFlink's operations): not where a job fails.
_RUNTIME_FRAMES = ("apache_beam/", "pyflink/fn_execution/")
#: How Python introduces the exception a traceback's exception was raised from or while handling.
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
#: Lines that end a Python traceback inside a Java stack trace.
_JAVA_LINE = re.compile(r"^(\tat |\t\.\.\. \d+ more|Caused by:)")


def python_traceback(stacktrace: str, keep_frames: int = 8) -> str:
    """The innermost Python traceback in a Flink exception's stack trace (with the exceptions it was raised from,
    as Python chains them), or ``""`` when it carries none.

    Flink reports a Python worker's failure as Java exceptions whose message holds the worker's traceback. This
    keeps that traceback alone: its frames without Beam's and PyFlink's machinery (the last ``keep_frames`` of
    the rest per exception, caret lines dropped) and the exceptions' own lines, up to the Java frames after it.
    """
    starts = [m.start() for m in re.finditer(re.escape(PYTHON_TRACEBACK), stacktrace)]
    if not starts:
        return ""
    first = len(starts) - 1
    while first > 0 and "\n\tat " not in stacktrace[starts[first - 1] : starts[first]]:
        first -= 1  # the same Python text: an exception chained to the next one
    chain = starts[first:]
    ends = [*chain[1:], len(stacktrace)]
    return "\n".join(_traceback_section(stacktrace[a:b], keep_frames) for a, b in zip(chain, ends, strict=True))


def _traceback_section(text: str, keep_frames: int) -> str:
    """One ``Traceback ...`` of :func:`python_traceback`: kept frames, then the exception's lines."""
    frames: list[list[str]] = []
    tail: list[str] = []
    for line in text.splitlines()[1:]:
        if _JAVA_LINE.match(line):
            break
        if not line.strip():
            continue
        if tail or not line.startswith(" "):
            tail += ["", line, ""] if line.startswith(_CHAINED) else [line]
        elif line.startswith("  File "):
            frames.append([line])
        elif frames and line.strip().strip("^~ "):  # the frame's source line (carets marking it are noise)
            frames[-1].append(line)
    kept = [f for f in frames if not any(marker in f[0] for marker in _RUNTIME_FRAMES)][-keep_frames:]
    return "\n".join([PYTHON_TRACEBACK, *(ln for f in kept for ln in f), *tail]).rstrip()


def python_exception_line(traceback_text: str) -> str:
    """The last exception's own first line (``Type: message``) of a traceback :func:`python_traceback` returned."""
    lines = traceback_text.splitlines()
    last = max((i for i, ln in enumerate(lines) if ln == PYTHON_TRACEBACK), default=0)
    after = [ln for ln in lines[last + 1 :] if not ln.startswith(" ")]
    return after[0].strip() if after else (lines[-1].strip() if lines else "")


class ExceptionHistory(_FlinkModel):
    """``exceptionHistory`` of ``GET /jobs/{id}/exceptions``."""

    entries: list[ExceptionEntry] = Field(default_factory=list)
    truncated: bool = False


class JobExceptions(_FlinkModel):
    """``GET /jobs/{id}/exceptions`` (Flink 2.x has no ``rootException``)."""

    exception_history: ExceptionHistory = Field(default_factory=ExceptionHistory, alias="exceptionHistory")

    def summary(self, limit: int = 3) -> str:
        """The newest ``limit`` root causes, one per line (empty when there are none)."""
        entries = sorted(self.exception_history.entries, key=lambda e: e.timestamp, reverse=True)[:limit]
        return "\n".join(e.root_cause for e in entries)

    def newest(self) -> ExceptionEntry | None:
        """The newest failure, if any."""
        return max(self.exception_history.entries, key=lambda e: e.timestamp, default=None)

    def python_error(self) -> str:
        """The Python traceback of the newest failure that carries one (``""`` when none does)."""
        entries = sorted(self.exception_history.entries, key=lambda e: e.timestamp, reverse=True)
        return next((e.python_error for e in entries if e.python_error), "")


class CheckpointedJob(BaseModel):
    """A job that runs every task and completed a checkpoint after its newest failure
    (``FlinkRestHook.wait_until_checkpointed``): it took its input and its state through a full cycle."""

    job_id: str
    checkpoint_id: int
    #: Failures (restarts) before it got there, and the newest one's root cause (Flink Agents' action-state
    #: store often restarts a job once at start, and a job may recover).
    failures: int = 0
    newest_failure: str = ""


class AsyncOperationStatus(_FlinkModel):
    """``GET /jobs/{id}/savepoints/{trigger}`` (also used for stop-with-savepoint)."""

    status: Literal["IN_PROGRESS", "COMPLETED"]
    location: str | None = None
    failure_cause: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _flatten(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("status"), dict):
            operation = data.get("operation") or {}
            cause = operation.get("failure-cause")
            if isinstance(cause, dict):
                cause = cause.get("stack-trace") or cause.get("class") or str(cause)
            return {"status": data["status"]["id"], "location": operation.get("location"), "failure_cause": cause}
        return data

    @property
    def succeeded(self) -> bool:
        """COMPLETED with a location and without a failure cause."""
        return self.status == "COMPLETED" and self.failure_cause is None and bool(self.location)


class CheckpointRecord(_FlinkModel):
    """A completed checkpoint or savepoint in ``GET /jobs/{id}/checkpoints``."""

    id: int
    status: str
    is_savepoint: bool = False
    savepoint_format: str | None = Field(None, alias="savepointFormat")
    trigger_timestamp: int = 0
    latest_ack_timestamp: int = 0
    external_path: str | None = None
    checkpoint_type: str = ""


class CheckpointStats(_FlinkModel):
    """The parts of ``GET /jobs/{id}/checkpoints`` the control plane reads."""

    counts: dict[str, int] = Field(default_factory=dict)
    latest_savepoint: CheckpointRecord | None = None
    history: list[CheckpointRecord] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _pick(cls, data: Any) -> Any:
        if isinstance(data, dict) and "latest" in data:
            return {
                "counts": data.get("counts") or {},
                "latest_savepoint": (data.get("latest") or {}).get("savepoint"),
                "history": [h for h in data.get("history") or [] if h.get("status") == "COMPLETED"],
            }
        return data

    def savepoints(self) -> list[CheckpointRecord]:
        """Completed savepoints in the history (plus the latest one), newest first, without duplicates."""
        found = {h.id: h for h in self.history if h.is_savepoint}
        if self.latest_savepoint is not None:
            found[self.latest_savepoint.id] = self.latest_savepoint
        return sorted(found.values(), key=lambda h: h.id, reverse=True)


class JarFile(_FlinkModel):
    """One uploaded jar of ``GET /jars``."""

    id: str
    name: str
    uploaded: int = 0


# ------------------------------------------------------------------------------- control-plane results


class VertexInfo(BaseModel):
    """A vertex of the production plan as recorded at quiesce time."""

    id: str
    name: str
    parallelism: int
    max_parallelism: int | None = None


class ProductionPlan(BaseModel):
    """The production job's vertices (ids, names, parallelism, max parallelism) and its agent vertex."""

    job_id: str
    job_name: str
    max_parallelism: int | None = None
    vertices: list[VertexInfo] = Field(default_factory=list)
    agent_vertex_id: str | None = Field(
        None, description="vertex holding the 'action-execute-operator'; None for a plain PyFlink job"
    )

    @classmethod
    def from_job(cls, job: JobDetails, agent_operator_name: str = AGENT_OPERATOR_NAME) -> ProductionPlan:
        """Record a job's plan; the agent vertex is the one whose name contains ``agent_operator_name``."""
        vertices = [
            VertexInfo(id=v.id, name=v.name, parallelism=v.parallelism, max_parallelism=v.max_parallelism)
            for v in job.vertices
        ]
        agent = next((v.id for v in vertices if agent_operator_name in v.name), None)
        return cls(
            job_id=job.jid,
            job_name=job.name,
            max_parallelism=job.max_parallelism,
            vertices=vertices,
            agent_vertex_id=agent,
        )

    @property
    def agent_vertex(self) -> VertexInfo | None:
        """The agent operator's vertex, if the job has one."""
        return next((v for v in self.vertices if v.id == self.agent_vertex_id), None)


class ResumeResult(BaseModel):
    """XCom result of ``ResumeJobOperator``."""

    job_id: str
    job_name: str
    savepoint_path: str | None
    submitted_at: datetime
    running_at: datetime
    stopped_at: datetime | None = Field(None, description="when production stopped (from the quiesce result)")
    downtime_seconds: float | None = Field(
        default=None, description="stopped_at → RUNNING again (derived from the two when not given)"
    )
    submitter: str
    reattached: bool = False

    @model_validator(mode="after")
    def _downtime(self) -> ResumeResult:
        if self.downtime_seconds is None and self.stopped_at is not None:
            self.downtime_seconds = round((self.running_at - self.stopped_at).total_seconds(), 3)
        return self


class StopWindow(BaseModel):
    """Everything ``StopWindowOperator`` did between "production stops" and "production runs again", in one task.

    ``start_offsets`` (a ``StartOffsets``) and ``memory_cut`` (a ``ForkResult``) are kept as their JSON dicts:
    the tasks that would otherwise compute them (``start_offsets``, the baseline's fork) return them as they are.
    """

    start_offsets: dict[str, Any] | None = Field(None, description="the capture topic's end offsets at the savepoint")
    memory_cut: dict[str, Any] | None = Field(None, description="the baseline's memory fork taken at the cut")
    resumed: ResumeResult | None = Field(None, description="production resubmitted and RUNNING again")
    error: str | None = Field(None, description="the step that failed inside the window (production was resumed)")
    steps_s: dict[str, float] = Field(
        default_factory=dict, description="seconds per step: savepoint, offsets, memory_cut, resubmit, running"
    )


class QuiesceResult(BaseModel):
    """XCom result of ``QuiesceAndSavepointOperator``."""

    job_id: str
    job_name: str
    mode: QuiesceMode
    savepoint_path: str
    format_type: SavepointFormat
    trigger_id: str
    requested_at: datetime = Field(
        description="when the stop/savepoint was requested (production stops "
        "taking new input at this instant in drain/stop modes)"
    )
    savepoint_completed_at: datetime
    job_stopped_at: datetime | None = Field(None, description="the job's end time (drain/stop modes)")
    production_stopped: bool
    in_flight_work_possible: bool = Field(
        description="True in savepoint mode: the savepoint may contain in-flight (pending) agent work"
    )
    reused: bool = Field(False, description="a retry found this run's savepoint and reused it")
    plan: ProductionPlan
    note: str = ""
    #: what the stop window did while production was stopped (``StopWindowOperator`` only)
    window: StopWindow | None = None


class FlinkPythonProgram(BaseModel):
    """How to (re)submit a Python Flink job: the PythonDriver's ``-py``/``-pym``/``-pyfs`` and arguments.

    Paths are paths on the host that runs the program: the JobManager host for REST submission, the
    worker for CLI submission.
    """

    model_config = ConfigDict(extra="forbid")

    entry_point: str | None = Field(None, description="the job's .py file (PythonDriver -py)")
    module: str | None = Field(None, description="the job's module (PythonDriver -pym); needs pyfs/PYTHONPATH")
    program_args: list[str] = Field(default_factory=list, description="arguments after the program")
    pyfs: list[str] = Field(default_factory=list, description="files/dirs shipped with -pyfs")
    extra_jars: list[str] = Field(
        default_factory=list,
        description="jars added to the job's class path through pipeline.classpaths "
        "(never pipeline.jars: it would replace the flink-python jar); paths must exist on every Flink host",
    )
    parallelism: int | None = Field(None, ge=1)
    job_name: str | None = Field(None, description="pipeline.name; a name given to env.execute() wins")
    flink_config: dict[str, str] = Field(default_factory=dict, description="Flink configuration overrides")
    env: dict[str, str] = Field(default_factory=dict, description="environment of the client process (CLI)")

    @field_validator("flink_config", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _one_entry(self) -> FlinkPythonProgram:
        if bool(self.entry_point) == bool(self.module):
            raise ValueError(
                "FlinkPythonProgram needs exactly one of 'entry_point' (a .py file) or 'module' "
                f"(a module name); got entry_point={self.entry_point!r}, module={self.module!r}"
            )
        if self.entry_point and not self.entry_point.endswith(".py"):
            raise ValueError(f"FlinkPythonProgram.entry_point must be a .py file, got {self.entry_point!r}")
        return self

    def driver_args(self) -> list[str]:
        """The PythonDriver arguments: ``-py``/``-pym``, ``-pyfs``, then the program arguments."""
        args = ["-py", self.entry_point] if self.entry_point else ["-pym", str(self.module)]
        if self.pyfs:
            args += ["-pyfs", ",".join(self.pyfs)]
        return [*args, *self.program_args]

    def configuration(self) -> dict[str, str]:
        """Flink configuration of the submission: overrides plus parallelism and job name."""
        config = dict(self.flink_config)
        if self.parallelism is not None:
            config.setdefault("parallelism.default", str(self.parallelism))
        if self.job_name:
            config.setdefault("pipeline.name", self.job_name)
        if self.extra_jars:
            jars = [j if "://" in j else f"file://{j}" for j in self.extra_jars]
            config.setdefault("pipeline.classpaths", ";".join(jars))
        return config


class SubmittedJob(BaseModel):
    """What a submission returns."""

    job_id: str
    submitter: str
    submitted_at: datetime
    savepoint_path: str | None = None
    allow_non_restored_state: bool = False
    seconds: float = 0.0
    lock_wait_s: float = Field(default=0.0, description="seconds waited for the JobManager's submission lock")
    capacity_wait_s: float = Field(default=0.0, description="seconds waited for free task slots before submitting")
    slots: int = Field(default=0, description="task slots the submission asked for (0: not admitted by slots)")

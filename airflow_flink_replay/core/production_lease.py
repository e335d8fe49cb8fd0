"""A production's lease: which replay run may stop and resume one production job, and until when.

``max_active_runs=1`` holds per DAG only: the release gate and the manual replay DAG of one production,
triggered at the same moment, would both stop it. Each run therefore holds production's lease from its
quiesce (before production is touched) until production is verified RUNNING again (the window's resume,
``resume_production`` or ``assert_production``); a second run waits for it, bounded, or fails before it
touches anything.

The lease lives in the run storage as numbered *generations* (``000000000007.json``), each created
exclusively: the newest generation is the lease's state. A run takes the lease by creating the next
generation, so of two runs racing for it exactly one creates it; the holder alone rewrites its own
generation (renewal, release). A generation whose holder stopped renewing it expires (``expires_at``) and
may be taken over: the taker names whose lease it took (``took_over``). The older generations are the
lease's history: ``assert_production`` reads in it whether another run stopped production after this one.

Pure: the record format and the decisions (pydantic + hashlib); the storage is
:mod:`airflow_flink_replay.hooks.production_lease`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LEASE_SCHEMA = 1
#: Seconds a lease stays valid without renewal. The holding task renews it every quarter of that; between
#: tasks (a failed quiesce, then ``resume_production``) only this covers the hold.
DEFAULT_TTL_S = 600.0
#: Seconds a run waits for another run's lease before it fails (nothing touched).
DEFAULT_WAIT_S = 300.0
#: Generations kept as history; older ones are removed by the run that creates a new one.
KEEP_GENERATIONS = 50
#: The folder below ``runs_uri`` that holds every production's lease.
LEASE_FOLDER = "_leases"
_GENERATION = re.compile(r"^(\d{12})\.json\Z")
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")

#: What a run does about the newest generation: create the next one (``acquire``: none or released; ``take_over``:
#: expired), rewrite its own (``reenter``: this run holds it), or ``wait`` (another run holds it).
Decision = Literal["acquire", "reenter", "take_over", "wait"]


def lease_folder(runs_uri: str) -> str:
    """Where the leases of the productions a spec replays live: ``<runs_uri>/_leases`` (a local folder as a path)."""
    return f"{runs_uri.removeprefix('file://').rstrip('/')}/{LEASE_FOLDER}"


def generation_file(generation: int) -> str:
    """The file name of one generation (sortable as text)."""
    return f"{generation:012d}.json"


def parse_generation_file(name: str) -> int | None:
    """The generation a file name holds, None for any other file (temporary files, strays)."""
    found = _GENERATION.match(name.rsplit("/", 1)[-1])
    return int(found.group(1)) if found else None


def to_prune(generations: list[int], keep: int = KEEP_GENERATIONS) -> list[int]:
    """The generations older than the newest ``keep``."""
    return sorted(generations)[:-keep] if keep > 0 and len(generations) > keep else []


class Production(BaseModel):
    """What identifies one production: its Flink cluster's REST address and its job name."""

    model_config = ConfigDict(frozen=True)

    flink_url: str
    job_name: str

    @classmethod
    def of(cls, flink_url: str, job_name: str) -> Production:
        """The identity with the address normalized (no trailing slash, lower-case scheme and host)."""
        scheme, sep, rest = flink_url.strip().rstrip("/").partition("://")
        host, slash, path = rest.partition("/")
        url = f"{scheme.lower()}{sep}{host.lower()}{slash}{path}" if sep else flink_url.strip().rstrip("/")
        if not job_name:
            raise ValueError("a production lease needs production's job name (production.job_name of the spec)")
        return cls(flink_url=url, job_name=job_name)

    @property
    def key(self) -> str:
        """The lease's folder name: the job name made file-safe, and a digest of the whole identity."""
        digest = hashlib.sha256(f"{self.flink_url}\n{self.job_name}".encode()).hexdigest()[:16]
        return f"{_SLUG.sub('-', self.job_name)[:60].strip('-.') or 'job'}-{digest}"

    def describe(self) -> str:
        """``'name' on <url>``."""
        return f"{self.job_name!r} on {self.flink_url}"


class LeaseHolder(BaseModel):
    """The replay run (and its task) that holds a lease; the run is the holder, its tasks take turns."""

    model_config = ConfigDict(frozen=True)

    dag_id: str
    run_id: str
    task_id: str = ""
    try_number: int | None = None
    host: str = ""
    pid: int | None = None

    @property
    def label(self) -> str:
        """``<dag_id>/<run_id>``: the run, as the UI and the messages name it."""
        return f"{self.dag_id}/{self.run_id}"

    def same_run(self, other: LeaseHolder | None) -> bool:
        """Whether ``other`` is a task of the same DAG run."""
        return other is not None and (self.dag_id, self.run_id) == (other.dag_id, other.run_id)

    def describe(self) -> str:
        """The run, and where its holding task ran."""
        task = f"task {self.task_id}" + (f" try {self.try_number}" if self.try_number else "") if self.task_id else ""
        where = ", ".join(p for p in (task, f"host {self.host}" if self.host else "",
                                      f"pid {self.pid}" if self.pid else "") if p)  # fmt: skip
        return f"run {self.label}" + (f" ({where})" if where else "")


class LeaseRecord(BaseModel):
    """One generation of a production's lease."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = LEASE_SCHEMA
    generation: int = Field(ge=1)
    production: Production
    holder: LeaseHolder
    acquired_at: datetime
    expires_at: datetime
    ttl_s: float = Field(gt=0)
    waited_s: float = 0.0
    renewed_at: datetime | None = None
    released_at: datetime | None = None
    released_by: str | None = Field(default=None, description="the task that released it")
    took_over: LeaseHolder | None = Field(default=None, description="the holder of the expired lease taken over")
    took_over_expired_at: datetime | None = None
    job_id: str | None = Field(default=None, description="production's Flink job the holder stops and resumes")
    savepoint: str | None = Field(default=None, description="the savepoint production runs from at the release")
    check_only: bool = Field(
        default=False, description="taken by a check that never stops production (assert_production)"
    )

    def held(self, now: datetime) -> bool:
        """Held and not expired."""
        return self.released_at is None and now < self.expires_at

    def expired(self, now: datetime) -> bool:
        """Never released, and its holder stopped renewing it."""
        return self.released_at is None and now >= self.expires_at

    def describe(self) -> str:
        """Who holds it and how long: the line a waiting run and the UI show."""
        state = (f"released at {self.released_at.isoformat()}" if self.released_at
                 else f"since {self.acquired_at.isoformat()}, valid until {self.expires_at.isoformat()}")  # fmt: skip
        return f"{self.holder.describe()}, {state} (lease generation {self.generation})"

    def summary(self, *, held_by: LeaseRecord | None = None) -> dict[str, Any]:
        """The run record's and the XCom's ``lease`` value."""
        return lease_summary(self, waited_s=self.waited_s, held_by=held_by)


def lease_summary(
    record: LeaseRecord | None, *, waited_s: float = 0.0, held_by: LeaseRecord | None = None
) -> dict[str, Any]:
    """``lease`` of the run record and the XCom: the holder, when it was acquired and released, how long the run
    waited for it, whose expired lease it took over; without ``record``, the run that held it instead."""
    return {
        "holder": record.holder.label if record else None,
        "task": record.holder.task_id if record else None,
        "generation": record.generation if record else None,
        "acquired_at": record.acquired_at.isoformat() if record else None,
        "expires_at": record.expires_at.isoformat() if record else None,
        "released_at": record.released_at.isoformat() if record and record.released_at else None,
        "released_by": record.released_by if record else None,
        "waited_s": round(record.waited_s if record else waited_s, 3),
        "took_over": record.took_over.label if record and record.took_over else None,
        "held_by": held_by.holder.label if held_by else None,
        "production": known.production.describe() if (known := record or held_by) else None,
    }


def decide(current: LeaseRecord | None, me: LeaseHolder, now: datetime) -> Decision:
    """What ``me`` does about the newest generation ``current``."""
    if current is None or current.released_at is not None:
        return "acquire"
    if me.same_run(current.holder):
        return "reenter"  # this run holds it (another of its tasks, or an earlier try): expired or not
    return "take_over" if current.expired(now) else "wait"


def new_generation(
    current: LeaseRecord | None,
    production: Production,
    me: LeaseHolder,
    *,
    ttl_s: float,
    now: datetime,
    waited_s: float = 0.0,
    job_id: str | None = None,
    check_only: bool = False,
) -> LeaseRecord:
    """The next generation, held by ``me`` (naming the expired holder it takes over, if any); ``check_only``: for a
    check that never stops production."""
    taken = current is not None and decide(current, me, now) == "take_over"
    return LeaseRecord(
        generation=(current.generation + 1) if current else 1,
        production=production,
        holder=me,
        acquired_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
        ttl_s=ttl_s,
        waited_s=round(waited_s, 3),
        took_over=current.holder if taken and current else None,
        took_over_expired_at=current.expires_at if taken and current else None,
        job_id=job_id or (current.job_id if taken and current else None),
        check_only=check_only,
    )


def renewed(record: LeaseRecord, me: LeaseHolder, *, ttl_s: float, now: datetime, **updates: Any) -> LeaseRecord:
    """``record`` renewed by a task of its holder's run (``updates``: ``job_id``, ``savepoint``)."""
    fields = {k: v for k, v in updates.items() if v is not None}
    return record.model_copy(
        update={"holder": me, "renewed_at": now, "expires_at": now + timedelta(seconds=ttl_s), "ttl_s": ttl_s, **fields}
    )


def released(record: LeaseRecord, *, by: str, now: datetime, savepoint: str | None = None) -> LeaseRecord:
    """``record`` released by its holder's task ``by``."""
    update: dict[str, Any] = {"released_at": now, "released_by": by}
    if savepoint:
        update["savepoint"] = savepoint
    return record.model_copy(update=update)


def of_run(records: list[LeaseRecord], me: LeaseHolder) -> list[LeaseRecord]:
    """The generations ``me``'s run held, oldest first."""
    return [r for r in records if me.same_run(r.holder)]


def others_since(records: list[LeaseRecord], me: LeaseHolder) -> list[LeaseRecord]:
    """The generations other runs held to stop production after this run's last one (all of them when this run
    held none); a check's generation touched nothing."""
    mine = of_run(records, me)
    after = mine[-1].generation if mine else 0
    return [r for r in records if r.generation > after and not me.same_run(r.holder) and not r.check_only]


def last_stop_before(records: list[LeaseRecord], generation: int) -> LeaseRecord | None:
    """The newest generation before ``generation`` taken to stop production (not a check's), or None."""
    found = [r for r in records if r.generation < generation and not r.check_only]
    return found[-1] if found else None


def utcnow() -> datetime:
    """Now, in UTC (the lease's clock: the workers' clocks must agree within a small part of the TTL)."""
    return datetime.now(UTC)

"""This DAG run's hold on production's lease, as the quiesce, resume and check operators use it.

The lease (:mod:`airflow_flink_replay.core.production_lease`, stored by
:class:`~airflow_flink_replay.hooks.production_lease.ProductionLeaseHook`) keeps two replay runs of one
production from stopping it at the same time. :class:`RunLease` is the operators' side of it: the holder is
the DAG run (its tasks take turns), every step is logged in the task's log, the lease as the task left it is
pushed as the XCom ``lease`` (the run record reads it), and the Airflow Variable
``flink_replay_lease__<production key>`` says who holds it now (best effort: for the UI's Variables page).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from typing import Any, NamedTuple

from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.production_lease import (
    DEFAULT_TTL_S,
    DEFAULT_WAIT_S,
    LeaseHolder,
    LeaseRecord,
    Production,
    lease_summary,
    of_run,
    others_since,
    utcnow,
)
from airflow_flink_replay.exceptions import ProductionLeaseHeldError, ProductionLeaseNotHeldError
from airflow_flink_replay.hooks.production_lease import Heartbeat, ProductionLeaseHook
from airflow_flink_replay.ids import XCOM_LEASE_KEY

#: The Airflow Variable that names the lease's holder (prefix; the production's key follows).
LEASE_VARIABLE_PREFIX = "flink_replay_lease__"


class LeaseSettings(NamedTuple):
    """Production's lease as the operators that touch production take it (``lease=``: the quiesce and stop window,
    the resume, the production check; None: no lease). The replay DAG passes the same settings to all three.

    A NamedTuple because ``folder`` is templated: Airflow renders a tuple's members into a new tuple of the same
    class (an object's attributes it would set in place, on an object the DAG's tasks share).

    :param folder: the folder of production leases (templated; the replay DAG: ``<runs_uri>/_leases``).
    :param wait: seconds the quiesce waits while another run holds the lease, then fails touching nothing
        (the resume and the check never wait: a lease another run holds is that run's production).
    :param ttl: seconds the lease stays valid without renewal (renewed every quarter of it while held).
    """

    folder: str
    wait: float = DEFAULT_WAIT_S
    ttl: float = DEFAULT_TTL_S


class RunLease:
    """Production's lease as one task of a DAG run holds it.

    :param log: the task's logger.
    :param context: the task's context (its ``ti`` names the holder and receives the XCom).
    :param lease_dir: the folder of the leases (``<runs_uri>/_leases``).
    :param flink_url: production's Flink REST address; with ``job_name`` production's identity.
    :param job_name: production's job name.
    :param ttl_s: seconds the lease stays valid without renewal.
    """

    def __init__(
        self, log: Any, context: Any, *, lease_dir: str, flink_url: str, job_name: str, ttl_s: float = DEFAULT_TTL_S
    ) -> None:
        ti = context["ti"]
        self.log, self.ti, self.ttl_s = log, ti, float(ttl_s)
        self.production = Production.of(flink_url, job_name)
        self.hook = ProductionLeaseHook(lease_dir, self.production)
        self.me = LeaseHolder(
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            try_number=getattr(ti, "try_number", None),
            host=socket.gethostname(),
            pid=os.getpid(),
        )
        self.record: LeaseRecord | None = None
        self._beat: Heartbeat | None = None

    def acquire(self, *, wait_s: float, job_id: str | None = None) -> LeaseRecord:
        """Take the lease, waiting up to ``wait_s`` while another run holds it (logged with the holder).

        :raises AirflowFailException: still held after ``wait_s``: this run touched nothing; names the holder.
        """

        def waiting(holder: LeaseRecord, waited: float) -> None:
            self.log.warning(
                "Production %s is held by %s: waiting up to %.0f s more for its lease before stopping anything",
                self.production.describe(), holder.describe(), max(0.0, wait_s - waited),
            )  # fmt: skip

        try:
            self.record = self.hook.acquire(self.me, ttl_s=self.ttl_s, wait_s=wait_s, job_id=job_id, on_wait=waiting)
        except ProductionLeaseHeldError as held:
            self.push(lease_summary(None, waited_s=held.waited_s, held_by=held.holder))
            raise AirflowFailException(
                f"Production {self.production.describe()} is held by {held.holder.describe()}: another replay run "
                f"of this production is stopping and resuming it. This run waited {held.waited_s:.0f} s for "
                "production's lease and touched nothing (no stop, no savepoint). Fix: run it again once that run's "
                "resume_production task has finished, or give the spec a longer lease_wait_minutes"
            ) from held
        took = f", taking over the expired lease of {self.record.took_over.describe()}" if self.record.took_over else ""
        self.log.info("Production's lease taken: %s holds %s%s (lease file %s)", self.me.describe(),
                      self.production.describe(), took, self.hook.folder)  # fmt: skip
        self.push(self.record.summary())
        self._variable(f"held by {self.record.describe()}")
        return self.record

    def acquire_now(self, *, check_only: bool = False) -> LeaseRecord | None:
        """Take the lease without waiting (this run's own is renewed); None when another run holds it.
        ``check_only``: for a check that never stops production."""
        held, _ = self.hook.try_acquire(self.me, ttl_s=self.ttl_s, check_only=check_only)
        if held is not None:
            self.record = held
            self._variable(f"held by {held.describe()}")
        return held

    def note_job(self, job_id: str) -> None:
        """Record in the lease the production job this run now stops and resumes."""
        self.record = self.hook.renew(self.me, ttl_s=self.ttl_s, job_id=job_id)

    def release(self, *, savepoint: str | None = None, why: str = "") -> LeaseRecord | None:
        """Release the lease if this run holds it (idempotent); a lease held by another run is left alone."""
        try:
            done = self.hook.release(self.me, by=self.me.task_id, savepoint=savepoint, beat=self._beat)
        except ProductionLeaseNotHeldError as exc:
            self.log.warning("Production's lease not released by this run: %s", exc)
            return None
        if done is not None and done.released_by == self.me.task_id:
            self.log.info("Production's lease released by %s%s", self.me.describe(), f" ({why})" if why else "")
            self._variable(f"free (last: {done.describe()})")
        self.record = done or self.record
        return done

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[Heartbeat]:
        """Renew the lease while the block runs."""
        with self.hook.heartbeat(self.me, ttl_s=self.ttl_s) as beat:
            self._beat = beat
            try:
                yield beat
            finally:
                self._beat = None

    def history(self) -> list[LeaseRecord]:
        """The lease's kept generations, oldest first."""
        return self.hook.records()

    def held_by_other(self) -> LeaseRecord | None:
        """The generation another run holds now, or None."""
        current = self.hook.current()
        held = current is not None and current.held(utcnow()) and not self.me.same_run(current.holder)
        return current if held else None

    def of_this_run(self, history: list[LeaseRecord] | None = None) -> list[LeaseRecord]:
        """The generations this run held."""
        return of_run(self.history() if history is None else history, self.me)

    def others_since(self, history: list[LeaseRecord]) -> list[LeaseRecord]:
        """The generations other runs held after this run's last one."""
        return others_since(history, self.me)

    def push(self, summary: dict[str, Any]) -> None:
        """Push the lease as the XCom ``lease`` (the run record's ``lease``)."""
        with contextlib.suppress(Exception):  # a context without XCom (a test's) still holds the lease
            self.ti.xcom_push(key=XCOM_LEASE_KEY, value=summary)

    def _variable(self, text: str) -> None:
        """Best effort: the Variable the UI's Variables page shows (a worker that cannot write it holds it all the
        same)."""
        try:
            from airflow.sdk import Variable

            Variable.set(
                f"{LEASE_VARIABLE_PREFIX}{self.production.key}",
                json.dumps({"production": self.production.describe(), "state": text, "at": utcnow().isoformat()}),
                description="production's replay lease (airflow-flink-replay): which replay run may stop it now",
            )
        except Exception as exc:
            self.log.debug("lease Variable not written (%s: %s)", type(exc).__name__, exc)


def run_lease(
    log: Any, context: Any, lease: LeaseSettings | None, *, flink_url: str, job_name: str | None
) -> RunLease | None:
    """The task's :class:`RunLease`, None without ``lease`` (or its folder: an operator used outside the replay
    DAG)."""
    if lease is None or not lease.folder:
        return None
    if not job_name:
        raise AirflowFailException(
            "production's lease needs production's job name, and none was given or found. Fix: pass job_name"
        )
    return RunLease(log, context, lease_dir=str(lease.folder), flink_url=flink_url, job_name=job_name,
                    ttl_s=float(lease.ttl))  # fmt: skip

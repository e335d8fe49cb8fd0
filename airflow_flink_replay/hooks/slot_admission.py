"""Admitting replay jobs by the Flink cluster's free task slots, so that runs queue instead of timing out.

A replay submission asks for the slots its jobs need (with Flink's default slot sharing, a job of
parallelism *p* takes *p* slots). :meth:`SlotAdmission.room` says whether the cluster has them free now;
the submitter holds the JobManager's submission lock while it looks, submits, and :meth:`SlotAdmission.settle`
waits until the new jobs hold their slots — so the next submitter, on any host, counts them as taken. A
submission that does not fit waits outside the lock (:meth:`SlotAdmission.wait_for_room`) and tries again;
one that could never fit (more slots than the cluster has) fails at once with the fix.
"""

from __future__ import annotations

import logging
import time

from airflow_flink_replay.core.flink_models import ClusterOverview, JobsOverview
from airflow_flink_replay.exceptions import FlinkSubmissionError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook

log = logging.getLogger(__name__)
#: Subtask states of a job still waiting for (or being deployed into) its slots.
PENDING_TASK_STATES = ("created", "scheduled", "deploying")
_ENDED = ("FINISHED", "FAILED", "CANCELED", "SUSPENDED")
#: Seconds the lock holder waits, at most, for the jobs it submitted to take their slots.
DEFAULT_SETTLE_S = 60.0
#: Seconds a submission waits, at most, for free slots (``capacity_wait_minutes`` of the spec overrides it).
DEFAULT_CAPACITY_WAIT_S = 1800.0


def never_fits(overview: ClusterOverview, slots: int) -> bool:
    """Whether ``slots`` exceed every slot the cluster has (a cluster without TaskManagers may be restarting one)."""
    return 0 < overview.slots_total < slots


def pending_jobs(jobs: JobsOverview) -> list[str]:
    """Names of the jobs that have subtasks not yet running in a slot (``created``, ``scheduled``, ``deploying``)."""
    return [
        job.name for job in jobs.jobs
        if job.state not in _ENDED and any(job.tasks.get(state, 0) for state in PENDING_TASK_STATES)
    ]  # fmt: skip


class SlotAdmission:
    """Free-slot admission on the cluster behind ``hook``.

    :param hook: the Flink REST hook of the cluster the jobs run on.
    :param slots: the slots the submission's jobs need (0: no admission).
    :param timeout: seconds :meth:`wait_for_room` waits in all, at most.
    :param poll_s: seconds between two looks at ``/overview``.
    """

    def __init__(self, hook: FlinkRestHook, slots: int, *, timeout: float = DEFAULT_CAPACITY_WAIT_S,
                 poll_s: float = 2.0) -> None:
        self.hook, self.slots, self.timeout, self.poll_s = hook, slots, timeout, poll_s
        self.started = time.monotonic()
        #: Seconds spent waiting for free slots (outside the submission lock).
        self.waited_s = 0.0
        #: Free slots seen when the submission was admitted.
        self.free_at_admission: int | None = None

    def room(self) -> bool:
        """Whether the cluster has ``slots`` free now (raises when it never will)."""
        if self.slots <= 0:
            return True
        overview = self.hook.get_overview()
        if never_fits(overview, self.slots):
            raise FlinkSubmissionError(
                f"the replay jobs need {self.slots} task slots but the cluster at {self.hook.base_url} has only "
                f"{overview.slots_total}: they could never all run. Nothing was submitted. Fix: give the replay "
                "cluster more TaskManagers or taskmanager.numberOfTaskSlots, or run fewer variants (aa_replays) or "
                "a lower parallelism; see docs/real-cluster.md#sizing-the-replay-cluster"
            )
        if overview.slots_available >= self.slots:
            self.free_at_admission = overview.slots_available
            return True
        return False

    def wait_for_room(self) -> None:
        """Wait (not holding the submission lock) until ``slots`` look free; raises after the timeout."""
        began = time.monotonic()
        announced = False
        try:
            while True:
                overview = self.hook.get_overview()
                if overview.slots_available >= self.slots:
                    return
                if not announced:
                    log.info("waiting for %d free task slots on %s (%d of %d free)", self.slots, self.hook.base_url,
                             overview.slots_available, overview.slots_total)  # fmt: skip
                    announced = True
                if time.monotonic() - self.started > self.timeout:
                    raise FlinkSubmissionError(
                        f"no room for {self.slots} task slots on {self.hook.base_url} within {self.timeout:g} s "
                        f"({overview.slots_available} of {overview.slots_total} free): other replays hold them. "
                        "Nothing was submitted. Fix: raise capacity_wait_minutes, give the replay cluster more slots, "
                        "or run fewer gate runs at once"
                    )
                time.sleep(self.poll_s)
        finally:
            self.waited_s += time.monotonic() - began

    def settle(self, timeout: float = DEFAULT_SETTLE_S) -> float:
        """Wait until no job on the cluster waits for slots (the new ones hold theirs); returns the seconds waited.
        Bounded: a job that cannot be placed is the cluster's business, the lock is freed anyway."""
        if self.slots <= 0:
            return 0.0
        began = time.monotonic()
        while True:
            pending = pending_jobs(self.hook.list_jobs())
            if not pending:
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                log.warning("jobs still wait for task slots after %.0f s: %s", timeout, ", ".join(pending[:5]))
                return time.monotonic() - began
            time.sleep(0.5)

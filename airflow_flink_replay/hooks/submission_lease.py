"""One Python program at a time per JobManager, across every Airflow worker host.

A JobManager runs Python programs (``/jars/{id}/run`` and ``/plan`` with the PythonDriver) through a static
gateway: two at once fail, or one request submits the other's job. On one host a ``flock``
(:class:`~airflow_flink_replay.hooks.flink_submit.PythonDriverLock`) keeps them apart; workers on several hosts
(Celery, Kubernetes) need a lock they all reach. :class:`SharedSubmissionLease` is that lock: a lease in a
shared folder (the Flink connection's extra ``submission_lease_uri``: a mounted folder, or an object store
with conditional writes such as S3), kept the way production's lease is kept
(:class:`~airflow_flink_replay.hooks.production_lease.ProductionLeaseHook`: numbered generations created
exclusively, renewed while held, taken over once expired when a holder died).

Each hold is its own holder (a fresh id), so two tasks of one DAG run exclude each other too.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterator

from airflow_flink_replay.core.production_lease import LeaseHolder, Production
from airflow_flink_replay.exceptions import FlinkSubmissionError, ProductionLeaseHeldError
from airflow_flink_replay.hooks.production_lease import ProductionLeaseHook

#: The lease's name beside the JobManager's address (its folder: ``python-driver-<digest>``).
LEASE_NAME = "python-driver"
#: Seconds a hold stays valid without renewal: a worker that died holding it blocks others this long at most.
DEFAULT_TTL_S = 120.0
#: Seconds between two looks at a held lease (submissions take seconds: a long poll would idle the cluster).
POLL_S = 0.25
#: Generations kept as history (each hold creates one).
KEEP = 20


def _host() -> str:
    """This worker's host name as Airflow reports it (its ``hostname_callable``), else the machine's."""
    try:
        from airflow.utils.net import get_hostname

        return str(get_hostname())
    except Exception:  # no Airflow config here (a script): the machine's name
        return socket.gethostname()


def _holder() -> LeaseHolder:
    """A holder of its own for this hold, naming the Airflow task it runs in (from Airflow's context variables)."""
    env = os.environ
    dag_id = env.get("AIRFLOW_CTX_DAG_ID") or "flink-replay"
    run_id = f"{env.get('AIRFLOW_CTX_DAG_RUN_ID') or '-'}#{uuid.uuid4().hex[:12]}"
    try_number = env.get("AIRFLOW_CTX_TRY_NUMBER")
    return LeaseHolder(dag_id=dag_id, run_id=run_id, task_id=env.get("AIRFLOW_CTX_TASK_ID") or "",
                       try_number=int(try_number) if try_number and try_number.isdigit() else None,
                       host=_host(), pid=os.getpid())  # fmt: skip


class SharedSubmissionLease:
    """The JobManager at ``base_url``'s submission lease below ``lease_uri``.

    :param base_url: the JobManager's REST URL (the lease's key: every connection to it shares the lease).
    :param lease_uri: a folder every Airflow worker that submits to this JobManager reaches (``file:///shared/…``,
        ``s3://<aws_conn_id>@bucket/prefix``); must create files exclusively (see
        :class:`~airflow_flink_replay.hooks.production_lease.ProductionLeaseHook`).
    :param ttl_s: seconds a hold is valid without renewal (renewed every quarter of it while held).
    """

    def __init__(self, base_url: str, lease_uri: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.base_url = base_url
        self.lease_uri = lease_uri
        self.ttl_s = ttl_s
        self.leases = ProductionLeaseHook(lease_uri, Production.of(base_url, LEASE_NAME), keep=KEEP)

    @contextlib.contextmanager
    def hold(self, timeout: float) -> Iterator[float]:
        """Hold the lease; yields the seconds waited for it. Raises :class:`FlinkSubmissionError` after ``timeout``."""
        me = _holder()
        started = time.monotonic()
        try:
            self.leases.acquire(me, ttl_s=self.ttl_s, wait_s=timeout, poll_s=POLL_S)
        except ProductionLeaseHeldError as err:
            raise FlinkSubmissionError(
                f"another Python program has held the JobManager at {self.base_url} for more than {timeout:g} s "
                f"({err.holder.describe() if err.holder else 'unknown holder'}; lease in {self.leases.folder}): "
                "submissions queue behind it. Fix: look for a hung PythonDriver in the JobManager log, or raise the "
                "timeout; a worker that died holding it frees it after its TTL"
            ) from err
        waited = time.monotonic() - started
        beat = None
        try:
            with self.leases.heartbeat(me, ttl_s=self.ttl_s) as beat:
                yield waited
        finally:
            with contextlib.suppress(Exception):  # a lease lost or unreachable expires on its own
                self.leases.release(me, by=me.task_id or "submission", beat=beat)

"""A run's files as the API server finds them: their URIs from the run's XComs in the metadata DB, the files read
through Airflow's object storage (``file://`` and any ``ObjectStoragePath`` scheme, with the API server's
connections) once :mod:`.locations` allows them.

Where each file is: ``report.html``, ``summary.json`` and ``junit.xml`` at the URIs the comparison task pushed
(XCom ``comparison`` of task ``compare``: ``report_uri``, ``summary_uri``, ``junit_uri``); ``run_record.json`` in
the run folder the ``resolve`` task pushed (XCom ``run_dir``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from airflow_flink_replay import ids
from airflow_flink_replay.run_io import run_storage
from airflow_flink_replay.ui.locations import RunsLocation, contained
from airflow_flink_replay.ui.paths import REPORT_URI_KEYS, RUN_FILES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: What a page reads of one JSON file at most (a run record is tens of kB; a summary of many fields, some MB).
MAX_JSON_BYTES = 32 * 2**20
#: The size of the pieces a served file is sent in.
CHUNK_BYTES = 2**20


def _xcom(session: Session, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
    """One XCom value of a run's task (map index -1), deserialized as Airflow's own API does; None when absent."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    row = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == task_id,
            XComModel.key == key,
            XComModel.map_index == -1,
        )
    ).first()
    return XComModel.deserialize_value(row) if row is not None else None


def comparison(session: Session, dag_id: str, run_id: str) -> dict[str, Any] | None:
    """The comparison's summary the ``compare`` task pushed (key ``comparison``, pushed before a gate FAIL fails
    the task; else its return value); None before it compared."""
    found = _xcom(session, dag_id, run_id, ids.TASK_COMPARE, ids.XCOM_COMPARISON_KEY)
    if not isinstance(found, dict):
        found = _xcom(session, dag_id, run_id, ids.TASK_COMPARE, "return_value")
    return found if isinstance(found, dict) else None


def run_dir(session: Session, dag_id: str, run_id: str) -> str | None:
    """The run folder the ``resolve`` task pushed (XCom ``run_dir``); None when the run has none."""
    found = _xcom(session, dag_id, run_id, ids.TASK_RESOLVE, ids.XCOM_RUN_DIR_KEY)
    return str(found) if isinstance(found, str) and found else None


def file_uri(session: Session, dag_id: str, run_id: str, name: str) -> str | None:
    """Where the run's file ``name`` (one of :data:`~airflow_flink_replay.ui.paths.RUN_FILES`) is, as the run's
    tasks recorded it; None when they recorded none, or a URI whose last segment is not ``name`` (a report URI that
    names another file is not served under this name)."""
    if name not in RUN_FILES:
        return None
    if name == "run_record.json":
        folder = run_dir(session, dag_id, run_id)
        return run_storage.join(folder, name) if folder else None
    summary = comparison(session, dag_id, run_id) or {}
    uri = summary.get(REPORT_URI_KEYS[name])
    if not isinstance(uri, str) or uri.rstrip("/").rpartition("/")[2] != name:
        return None
    return uri


def open_run_file(uri: str, locations: list[RunsLocation]) -> IO[bytes]:
    """``uri`` opened for reading bytes, if :func:`~airflow_flink_replay.ui.locations.contained` allows it (raises
    ``RunFileRefusedError`` otherwise, ``OSError`` when it cannot be read)."""
    target = run_storage.location(contained(uri, locations))
    stream: IO[bytes] = target.open("rb")
    return stream


def chunks(stream: IO[bytes]) -> Iterator[bytes]:
    """The bytes of ``stream`` in pieces of :data:`CHUNK_BYTES`, closing it at the end (or when abandoned)."""
    with stream:
        while piece := stream.read(CHUNK_BYTES):
            yield piece


def read_json(uri: str, locations: list[RunsLocation], limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON document at ``uri`` (allowed by ``locations``); ``ValueError`` when it is larger than ``limit``
    bytes or not JSON."""
    with open_run_file(uri, locations) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return json.loads(data)


@dataclass(frozen=True)
class RunRef:
    """A replay DAG run as the metadata DB knows it: its run folder (``resolve``'s XCom) and its state."""

    dag_id: str
    run_id: str
    run_dir: str
    state: str | None
    started: datetime | None


def replay_dag_ids(session: Session) -> set[str]:
    """Every DAG with a replay run: those whose ``resolve`` task pushed a run folder."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    stmt = select(XComModel.dag_id).where(
        XComModel.task_id == ids.TASK_RESOLVE, XComModel.key == ids.XCOM_RUN_DIR_KEY
    ).distinct()
    return set(session.scalars(stmt))


def replay_runs(session: Session, dag_ids: set[str], limit: int) -> list[RunRef]:
    """The newest ``limit`` replay runs of ``dag_ids`` (by the time they were due to run), newest first."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    if not dag_ids:
        return []
    stmt = (
        select(XComModel, DagRun.state, DagRun.start_date)
        .join(DagRun, DagRun.id == XComModel.dag_run_id)
        .where(
            XComModel.task_id == ids.TASK_RESOLVE,
            XComModel.key == ids.XCOM_RUN_DIR_KEY,
            XComModel.map_index == -1,
            XComModel.dag_id.in_(sorted(dag_ids)),
        )
        .order_by(DagRun.run_after.desc(), DagRun.id.desc())
        .limit(limit)
    )
    refs = []
    for xcom, state, started in session.execute(stmt).all():
        folder = XComModel.deserialize_value(xcom)
        if isinstance(folder, str) and folder:
            refs.append(RunRef(xcom.dag_id, xcom.run_id, folder, str(state) if state else None, started))
    return refs

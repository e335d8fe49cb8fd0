"""What each page shows, gathered: the replay runs the user may read (metadata DB), their run records and
comparison summaries (files under the allowed runs locations), as the view models of :mod:`.replays`.

The list of runs comes from the metadata DB, not from listing the runs locations: a run is shown when Airflow
knows it (its ``resolve`` task pushed a run folder), its DAG's runs are readable by the user, and its run record
is under an allowed location and names the same DAG run. So authorization is decided per DAG by Airflow, nothing
lists a bucket, and a record copied into another run's folder is not taken for that run.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from airflow_flink_replay.core.run_record import RunRecord
from airflow_flink_replay.exceptions import RunFileRefusedError
from airflow_flink_replay.run_io import run_storage
from airflow_flink_replay.ui import auth, run_files
from airflow_flink_replay.ui.locations import RunsLocation, configured_locations
from airflow_flink_replay.ui.replays import FieldRow, Production, RunRow, field_rows, productions, run_row

#: How many run records are read at once (object stores answer one request at a time each).
READERS = 8


@dataclass
class Skipped:
    """Runs a page could not show, by why: no run record yet (the run is going on, or ended before its last
    task), the record outside the allowed runs locations, or unreadable (not a run record, or of another run)."""

    no_record: int = 0
    outside: int = 0
    unreadable: int = 0

    @property
    def total(self) -> int:
        """How many runs were left out."""
        return self.no_record + self.outside + self.unreadable


@dataclass
class ReplaysView:
    """The Replays page: each production's runs, what was left out, the allowed locations (as shown), the DAGs
    it was asked for (none: every DAG)."""

    productions: list[Production]
    runs: int
    skipped: Skipped
    locations: list[str]
    limit: int
    truncated: bool
    dag_ids: list[str] = field(default_factory=list)


def _record(ref: run_files.RunRef, locations: list[RunsLocation]) -> RunRecord | str:
    """The run record of ``ref``, or why there is none to show (``no_record``, ``outside``, ``unreadable``)."""
    try:
        found = run_files.read_json(run_storage.join(ref.run_dir, "run_record.json"), locations)
        record = RunRecord.model_validate(found)
    except RunFileRefusedError:
        return "outside"
    except FileNotFoundError:
        return "no_record"
    except (OSError, ValueError, ValidationError):
        return "unreadable"
    if (record.dag_id, record.run_id) != (ref.dag_id, ref.run_id):
        return "unreadable"
    return record


def replays_view(user: Any, limit: int, dag_ids: Iterable[str] = ()) -> ReplaysView:
    """The newest ``limit`` replay runs of the DAGs ``user`` may read (of ``dag_ids`` only, when given), grouped by
    production."""
    from airflow.utils.session import create_session

    locations = configured_locations()
    wanted = set(dag_ids)
    with create_session() as session:
        found = run_files.replay_dag_ids(session)
        readable = auth.readable(user, found & wanted if wanted else found)
        refs = run_files.replay_runs(session, readable, limit + 1)
    truncated, refs = len(refs) > limit, refs[:limit]
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        records = list(pool.map(lambda ref: _record(ref, locations), refs))
    skipped = Skipped()
    rows = []
    for ref, record in zip(refs, records, strict=True):
        if isinstance(record, str):
            setattr(skipped, record, getattr(skipped, record) + 1)
        else:
            rows.append(run_row(record, ref.state))
    shown = [str(loc) for loc in locations]
    return ReplaysView(productions(rows), len(rows), skipped, shown, limit, truncated, sorted(wanted))


@dataclass
class CompareSide:
    """One run of the compare view: its row (None when its record cannot be shown, ``problem`` says why) and
    its comparison's summary (None without one)."""

    key: str
    dag_id: str
    run_id: str
    row: RunRow | None = None
    problem: str | None = None
    summary: dict[str, Any] | None = field(default=None, repr=False)


@dataclass
class CompareView:
    """Two runs side by side, and their fields' rates next to each other."""

    a: CompareSide
    b: CompareSide
    fields: list[FieldRow]


#: What the compare view says when a side's record is missing, by the reason :func:`_record` gives.
PROBLEMS = {
    "no_record": "no run record yet: the run is going on, or ended before its last task",
    "outside": "its run folder is outside the runs locations this server reads ([flink_replay] runs_locations)",
    "unreadable": "its run record cannot be read as this run's",
    "unknown": "Airflow knows no replay run by this id",
}


def parse_run_key(text: str) -> tuple[str, str]:
    """``<dag_id>/<run_id>`` split at its first slash (a DAG id has none); ``ValueError`` when a part is empty."""
    dag_id, _, run_id = (text or "").strip().partition("/")
    if not dag_id or not run_id:
        raise ValueError(f"not <dag_id>/<run_id>: {text!r}")
    return dag_id, run_id


def _side(session: Any, key: str, locations: list[RunsLocation]) -> CompareSide:
    dag_id, run_id = parse_run_key(key)
    side = CompareSide(key, dag_id, run_id)
    folder = run_files.run_dir(session, dag_id, run_id)
    if folder is None:
        side.problem = PROBLEMS["unknown"]
        return side
    record = _record(run_files.RunRef(dag_id, run_id, folder, None, None), locations)
    if isinstance(record, str):
        side.problem = PROBLEMS[record]
        return side
    side.row = run_row(record)
    summary_uri = run_files.file_uri(session, dag_id, run_id, "summary.json")
    try:
        found = run_files.read_json(summary_uri, locations) if summary_uri else None
    except (RunFileRefusedError, OSError, ValueError):
        found = None
    side.summary = found if isinstance(found, dict) else None
    return side


def compare_view(user: Any, a: str, b: str) -> CompareView:
    """Runs ``a`` and ``b`` (``<dag_id>/<run_id>``) side by side; 403 (``HTTPException``) unless ``user`` may read
    both DAGs' runs, ``ValueError`` for a malformed key."""
    from airflow.utils.session import create_session

    for key in (a, b):
        auth.require_runs(user, parse_run_key(key)[0])
    locations = configured_locations()
    with create_session() as session:
        side_a, side_b = _side(session, a, locations), _side(session, b, locations)
    return CompareView(side_a, side_b, field_rows(side_a.summary, side_b.summary))

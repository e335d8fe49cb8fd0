"""Airflow on the local stack: one environment and one way to run the replay DAGs.

``flink-replay demo`` and ``flink-replay run-dag`` both run the repository's three DAG files
(``dags/``) with ``airflow dags test`` against the stack: an Airflow home of their own, the stack's
connections as ``AIRFLOW_CONN_*`` variables, the spec in ``$FLINK_REPLAY_SPEC``. Everything Airflow prints
goes to a log file; what a person reads on the console is built afterwards from the run's task instances
and its run record (:mod:`airflow_flink_replay.local.run_view`).

The children get this interpreter's scripts folder (the venv's ``bin``) first on their ``PATH``:
``airflow standalone`` starts its scheduler, DAG processor and API server as ``airflow ...`` found by
name, which failed with ``FileNotFoundError: 'airflow'`` whenever the venv was not activated.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from airflow_flink_replay.local.stack import StackInfo

#: The repository's DAG files (the demo and ``run-dag`` load them; the spec comes from ``$FLINK_REPLAY_SPEC``).
DAGS_FOLDER = Path(__file__).resolve().parent.parent.parent / "dags"

#: The three replay DAGs by their short name (``flink-replay run-dag gate``) and their DAG id.
DAG_IDS = {
    "gate": "flink_agents_release_gate",
    "replay": "flink_agents_replay",
    "nightly": "flink_agents_nightly_replay",
}


def scripts_dir() -> Path:
    """The folder holding this installation's console scripts (``airflow``, ``flink-replay``): the venv's bin."""
    scripts = Path(sysconfig.get_path("scripts"))
    return scripts if (scripts / "airflow").exists() else Path(sys.executable).parent


def airflow_env(
    stack: StackInfo, airflow_home: Path, spec_path: Path, *, base: dict[str, str] | None = None,
    python_path: list[Path] | None = None,
) -> dict[str, str]:
    """The environment of an Airflow child on the stack: its own home, the repository's DAGs, the spec,
    the stack's connections (one ``AIRFLOW_CONN_*`` per entry of its connections file) and a ``PATH``
    that starts with the venv's bin (see the module docstring). ``python_path`` is put before
    ``$PYTHONPATH`` (where the user's job definition is importable from)."""
    env = {**(os.environ if base is None else base), **stack.env}
    env["PATH"] = os.pathsep.join([str(scripts_dir()), *([env["PATH"]] if env.get("PATH") else [])])
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(
            [*(str(p) for p in python_path), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "FLINK_REPLAY_SPEC": str(spec_path),
            "FLINK_REPLAY_STACK_DIR": stack.workdir,
            # the UI plugin serves the reports of runs written there (docs/ui.md)
            "AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS": ",".join(runs_locations(stack, spec_path)),
        }
    )
    env.update(connection_env(stack))
    return env


def runs_locations(stack: StackInfo, spec_path: Path) -> list[str]:
    """Where the runs of this Airflow are written: the stack's runs folder and the spec's ``runs_uri``."""
    import yaml

    found = [f"file://{Path(stack.workdir) / 'runs'}"]
    try:
        runs_uri = (yaml.safe_load(Path(spec_path).read_text()) or {}).get("runs_uri")
    except (OSError, ValueError):
        runs_uri = None
    if isinstance(runs_uri, str) and runs_uri and runs_uri not in found:
        found.append(runs_uri)
    return found


def connection_env(stack: StackInfo) -> dict[str, str]:
    """The stack's connections as environment variables: one ``AIRFLOW_CONN_<ID>`` per entry of its
    connections file."""
    conns = json.loads(Path(stack.connections_file).read_text())
    return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn) for conn_id, conn in conns.items()}


class TaskTiming(BaseModel):
    """One task instance of a DAG run, as the console view needs it."""

    task_id: str
    state: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    map_index: int = -1


class DagRunResult(BaseModel):
    """What one ``airflow dags test`` left: the run, its tasks, its run record (None if it got no record)."""

    dag_id: str
    run_id: str | None = None
    state: str | None = None
    tasks: list[TaskTiming] = []
    record: dict[str, Any] | None = None
    record_path: str | None = None
    #: the console view of the run (:func:`airflow_flink_replay.local.run_view.render_run`)
    lines: list[str] = []

    @property
    def verdict(self) -> str | None:
        """The run's verdict (PASS, FAIL, INCONCLUSIVE), None when it got none."""
        return (self.record or {}).get("verdict")


class AirflowRunner:
    """Runs Airflow commands in ``env``, appending everything they print to ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env, self.log_path = env, log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)

    def _run(self, *args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
        with self.log_path.open("a") as log:
            log.write(f"\n$ airflow {' '.join(args)}\n")
            log.flush()
            return subprocess.run(
                [sys.executable, "-m", "airflow", *args], env=self.env, text=True, check=False,
                stdout=subprocess.PIPE if capture else log, stderr=log,
            )

    def migrate(self) -> None:
        """Create or upgrade the Airflow metadata DB of this home; a failure names the log.

        Skipped when this home's sqlite DB was migrated by the installed Airflow version already (a marker
        next to it): every ``run-dag`` and demo run would otherwise pay Airflow's start-up for nothing."""
        marker = self._migrated_marker()
        if marker is not None and marker.exists():
            return
        if self._run("db", "migrate").returncode != 0:
            raise RuntimeError(f"`airflow db migrate` failed: see {self.log_path}")
        if (marker := self._migrated_marker()) is not None:  # the DB exists now
            marker.write_text("migrated\n")

    def _migrated_marker(self) -> Path | None:
        """The marker of a migrated default sqlite DB of this home and Airflow version; None for another DB."""
        if self.env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or not self.env.get("AIRFLOW_HOME"):
            return None
        home = Path(self.env["AIRFLOW_HOME"])
        if not (home / "airflow.db").exists():
            return None
        return home / f".migrated-{importlib.metadata.version('apache-airflow')}"

    def dags_test(self, dag_id: str, conf: dict[str, Any], runs_dir: Path) -> DagRunResult:
        """Run ``dag_id`` once with ``airflow dags test`` and return its run, tasks and run record.

        One Airflow child does both (the command, then the read of its run): Airflow's start-up, paid once."""
        return self._child(dag_id, runs_dir, "dags-test", json.dumps(conf))

    def last_run(self, dag_id: str, runs_dir: Path) -> DagRunResult:
        """The newest run of ``dag_id`` in this Airflow home: its task instances, run record and console view.

        Read in an Airflow child (this home's metadata DB; importing Airflow here would set it up in ``~``)."""
        return self._child(dag_id, runs_dir, "last-run")

    def _child(self, dag_id: str, runs_dir: Path, action: str, *args: str) -> DagRunResult:
        """Run this module's ``action`` in an Airflow child; it writes the newest run of ``dag_id`` to a file."""
        out = self.log_path.with_suffix(".last-run.json")
        out.unlink(missing_ok=True)
        with self.log_path.open("a") as log:  # the answer goes to a file: nothing Airflow prints can garble it
            if action == "dags-test":
                log.write(f"\n$ airflow dags test {dag_id} -c {args[0]}\n")
                log.flush()
            subprocess.run([sys.executable, "-m", __name__, action, dag_id, str(runs_dir), str(out), *args],
                           env=self.env, check=False, stdout=log, stderr=log)
        found = json.loads(out.read_text()) if out.exists() else {}
        out.unlink(missing_ok=True)
        return DagRunResult.model_validate({"dag_id": dag_id, **found})


def find_run_record(dag_runs_dir: Path, run_id: str) -> tuple[str | None, dict[str, Any] | None]:
    """The run record of ``run_id`` under ``<runs>/<dag_id>`` (path and content), or ``(None, None)``."""
    for path in sorted(dag_runs_dir.rglob("run_record.json")) if dag_runs_dir.exists() else ():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("run_id") == run_id:
            return str(path), record
    return None, None


def _last_run_json(dag_id: str, runs_dir: Path) -> dict[str, Any]:
    """Inside the Airflow child: the newest run of ``dag_id`` (metadata DB), its task instances, its run record
    and the console view of them."""
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(1)
        ).first()
        if run is None:
            return {}
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        ).all()
        tasks = [{"task_id": ti.task_id, "state": str(ti.state) if ti.state else None, "map_index": ti.map_index,
                  "start_date": ti.start_date, "end_date": ti.end_date} for ti in tis]
        state = str(run.state) if run.state else None
        return run_result(dag_id, run.run_id, state, tasks, runs_dir).model_dump(mode="json")


def run_result(dag_id: str, run_id: str, state: str | None, task_instances: Iterable[dict[str, Any]],
               runs_dir: Path) -> DagRunResult:
    """One run as the console shows it: its task instances (``task_id``, ``state``, ``start_date``,
    ``end_date``, ``map_index`` — as the REST API or the metadata DB gives them), its run record found under
    ``runs_dir/<dag_id>``, and the console view of both."""
    from airflow_flink_replay.local.run_view import render_run

    result = DagRunResult(
        dag_id=dag_id, run_id=run_id, state=state,
        tasks=[TaskTiming(task_id=ti["task_id"], state=str(ti["state"]) if ti.get("state") else None,
                          map_index=ti.get("map_index", -1), start=ti.get("start_date"), end=ti.get("end_date"))
               for ti in task_instances],
    )
    result.record_path, result.record = find_run_record(runs_dir / dag_id, run_id)
    result.lines = render_run(result.tasks, result.record, result.record_path)
    return result


def _dags_test(dag_id: str, conf: str) -> None:
    """Inside the Airflow child: ``airflow dags test <dag_id> -c <conf>``, as the ``airflow`` command runs it."""
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()
    args = cli_parser.get_parser().parse_args(["dags", "test", dag_id, "-c", conf])
    with contextlib.suppress(SystemExit):  # the run's outcome is read from the metadata DB afterwards
        args.func(args)


def _child_main(argv: list[str]) -> None:
    """``dags-test`` or ``last-run`` (:meth:`AirflowRunner.dags_test`, :meth:`AirflowRunner.last_run`)."""
    action, dag_id, runs_dir, out, *rest = argv
    if action == "dags-test":
        _dags_test(dag_id, rest[0])
    Path(out).write_text(json.dumps(_last_run_json(dag_id, Path(runs_dir))))


if __name__ == "__main__":  # run by AirflowRunner in the Airflow child's environment
    _child_main(sys.argv[1:])

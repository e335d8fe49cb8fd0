"""What the UI plugin's tests share: Airflow set up as the API server runs it, and replay runs to look at.

- **Auth**: Airflow's real ``SimpleAuthManager``, configured through Airflow's own config (environment variables
  ``AIRFLOW__CORE__…``): multi-team mode, so a user may read one team's DAGs and not another's. ``alice`` is a
  viewer of team ``team_a``, ``bob`` of team ``team_b`` (each test module's teams are its own, named
  ``team_a_<id>``: DAGs of an earlier module in the same metadata DB are not theirs); tokens are the JWTs Airflow's
  own login issues (``generate_jwt``), sent as ``Authorization: Bearer``.
- **DAGs**: each test DAG is written to the metadata DB in a bundle owned by a team, and run with ``dag.test()``;
  its ``resolve`` task pushes the run folder and its ``compare`` task the comparison's summary, both from the run's
  conf, so a test decides what the XComs say (a report URI with ``..``, another scheme, a symlink).
- **Files**: run folders under a temporary folder and under ``memory://`` (Airflow's fsspec memory filesystem),
  both in ``[flink_replay] runs_locations``.
- **App**: the plugin's own app object (``FlinkReplayPlugin.fastapi_apps``) mounted at ``/flink-replay`` in a parent
  FastAPI app, as the API server mounts it, driven by FastAPI's ``TestClient``.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay import ids
from airflow_flink_replay.core.run_record import RunRecord, VariantRecord
from airflow_flink_replay.run_io import run_storage
from tests.dag_testing import register_dag

#: Each user's role and team (the key of :attr:`UiEnv.teams`).
USERS = {"alice": ("viewer", "team_a"), "bob": ("viewer", "team_b")}
MEMORY_ROOT = "memory://afr-ui-runs"


@dataclass
class UiEnv:
    """The tests' Airflow: a client of the mounted plugin app, the runs folder, the two teams' DAGs."""

    client: Any
    runs: Path
    teams: dict[str, str]
    dags: dict[str, Any] = field(default_factory=dict)

    def user(self, name: str) -> Any:
        """The user ``name`` (one of :data:`USERS`) as Airflow's auth manager knows them."""
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        role, team = USERS[name]
        return SimpleAuthManagerUser(username=name, role=role, teams=[self.teams[team]])

    def token(self, name: str) -> dict[str, str]:
        """The ``Authorization`` header of the user ``name``."""
        from airflow.api_fastapi.app import get_auth_manager

        return {"Authorization": f"Bearer {get_auth_manager().generate_jwt(self.user(name))}"}

    def get(self, url: str, user: str | None = "alice", **kwargs: Any) -> Any:
        """GET ``url`` as ``user`` (None: without a login)."""
        return self.client.get(url, headers=self.token(user) if user else {}, **kwargs)

    def run(self, team: str, conf: dict[str, Any]) -> Any:
        """One run of ``team``'s DAG whose tasks push what ``conf`` says (``run_dir``, ``comparison``)."""
        try:
            return self.dags[team].test(run_conf=conf)
        finally:  # dag.test() syncs the configured bundles, and drops the teams of the tests' own
            _teams_and_bundles(self.teams)


def _dag(dag_id: str) -> Any:
    """A DAG whose ``resolve`` and ``compare`` tasks push the run folder and the comparison the run's conf gives."""
    from airflow.sdk import DAG, task

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:

        @task(task_id=ids.TASK_RESOLVE, multiple_outputs=True)
        def resolve(**context: Any) -> dict[str, Any]:
            run_dir = (context["dag_run"].conf or {}).get("run_dir")
            return {ids.XCOM_RUN_DIR_KEY: run_dir} if run_dir else {}

        @task(task_id=ids.TASK_COMPARE)
        def compare(**context: Any) -> None:
            found = (context["dag_run"].conf or {}).get("comparison")
            if found is not None:
                context["ti"].xcom_push(key=ids.XCOM_COMPARISON_KEY, value=found)

        resolve() >> compare()
    return dag


def _bundle(team: str) -> str:
    return f"afr-ui-{team}"


def _teams_and_bundles(teams: dict[str, str]) -> None:
    """Each team and its bundle in the metadata DB, the bundle owned by the team."""
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    with create_session() as session:
        for team in teams.values():
            bundle = _bundle(team)
            owner = session.merge(Team(name=team))
            found = session.merge(DagBundleModel(name=bundle))
            if owner not in found.teams:
                found.teams.append(owner)


@pytest.fixture(scope="module")
def ui_env(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiEnv]:
    """Airflow with SimpleAuthManager in multi-team mode, the plugin app mounted, a DAG per team."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    runs = tmp_path_factory.mktemp("ui-runs")
    uid = uuid.uuid4().hex[:6]
    teams = {"team_a": f"team_a_{uid}", "team_b": f"team_b_{uid}"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__CORE__AUTH_MANAGER",
                     "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager")  # fmt: skip
        patch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
        users = ",".join(f"{name}:{role}:{teams[team]}" for name, (role, team) in USERS.items())
        patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", users)
        patch.setenv("AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS", f"{runs}, {MEMORY_ROOT}")
        patch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(64))  # long enough for its HMAC
        from airflow.api_fastapi import app as api_app

        _teams_and_bundles(teams)  # the auth manager refuses users of teams the DB does not know
        api_app.init_auth_manager()
        from airflow_flink_replay.ui.paths import URL_PREFIX
        from airflow_flink_replay.ui.plugin import FlinkReplayPlugin

        parent = FastAPI()
        parent.mount(URL_PREFIX, FlinkReplayPlugin.fastapi_apps[0]["app"])
        env = UiEnv(TestClient(parent), runs, teams)
        for key, team in teams.items():
            dag = _dag(f"afr_ui_{team}")
            register_dag(dag, _bundle(team))
            env.dags[key] = dag
        _teams_and_bundles(teams)  # after the bundles are written (writing one anew leaves it without its team)
        try:
            yield env
        finally:
            api_app.purge_cached_app()  # the next test module gets the auth manager its own config names


def run_folder(root: Path | str, dag_id: str) -> str:
    """A new run folder of ``dag_id`` below ``root`` (a local folder or a URI), as the ``resolve`` task places one."""
    return run_storage.join(str(root), dag_id, uuid.uuid4().hex[:10])


def write_reports(run_dir: str, verdict: str = "PASS", fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The comparison's three reports in ``<run_dir>/compare-x/``; returns the summary the ``compare`` task
    pushes (with their URIs)."""
    folder = run_storage.join(run_dir, "compare-x")
    uri = (lambda p: p) if run_storage.is_uri(run_dir) else (lambda p: f"file://{p}")
    html = f"<!DOCTYPE html><html><head><style>body{{color:red}}</style></head><body>{verdict} report</body></html>"
    run_storage.write_text(run_storage.join(folder, "report.html"), html)
    summary = json.dumps({"verdict": verdict, "fields": fields or []})
    run_storage.write_text(run_storage.join(folder, "summary.json"), summary)
    run_storage.write_text(run_storage.join(folder, "junit.xml"), f'<testsuite name="replay" verdict="{verdict}"/>')
    return {
        "verdict": verdict,
        "report_uri": uri(run_storage.join(folder, "report.html")),
        "summary_uri": uri(run_storage.join(folder, "summary.json")),
        "junit_uri": uri(run_storage.join(folder, "junit.xml")),
    }


def write_record(run_dir: str, dagrun: Any, *, spec_name: str = "reviews", days_ago: float = 0.0,
                 verdict: str | None = "PASS", **values: Any) -> RunRecord:
    """The run record of ``dagrun`` in ``run_dir`` (``values``: the record's other fields)."""
    record = RunRecord(
        spec_name=spec_name, dag_id=dagrun.dag_id, run_id=dagrun.run_id,
        created_at=datetime.now(UTC) - timedelta(days=days_ago), verdict=verdict,
        variants=values.pop("variants", [
            VariantRecord(variant="baseline", agent_factory="agents.v1:job", duration_s=30.0),
            VariantRecord(variant="candidate", agent_factory="agents.v2:job", duration_s=32.5),
        ]),
        **values,
    )  # fmt: skip
    run_storage.write_text(run_storage.join(run_dir, "run_record.json"), record.model_dump_json(indent=2))
    return record

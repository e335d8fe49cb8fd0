"""Who may read what: Airflow's auth manager decides, with the same question Airflow's own DAG-run endpoints ask
(``GET`` on the DAG's runs, ``DagAccessEntity.RUN``, with the DAG's team in a multi-team deployment).

The file route uses Airflow's own dependency (``requires_access_dag``); the pages, which name DAGs in the query
string or list many, ask through :func:`may_read_runs` and :func:`readable` here. Who the user is comes from
Airflow's ``GetUserDep`` (the JWT in the ``Authorization`` header or the UI's ``_token`` cookie): no login, 401.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def may_read_runs(user: Any, dag_id: str) -> bool:
    """Whether ``user`` may read the runs of ``dag_id`` (the auth manager's answer)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    return bool(
        get_auth_manager().is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)),
            user=user,
        )
    )


def readable(user: Any, dag_ids: Iterable[str]) -> set[str]:
    """The DAGs of ``dag_ids`` whose runs ``user`` may read."""
    return {dag_id for dag_id in set(dag_ids) if may_read_runs(user, dag_id)}


def require_runs(user: Any, dag_id: str) -> None:
    """Raise 403 unless ``user`` may read the runs of ``dag_id``."""
    from fastapi import HTTPException, status

    if not may_read_runs(user, dag_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")

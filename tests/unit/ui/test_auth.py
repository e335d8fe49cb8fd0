"""Authorization by Airflow's auth manager (SimpleAuthManager in multi-team mode): a user reads the runs of their
team's DAGs only."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from airflow_flink_replay.ui import auth
from tests.unit.ui.airflow_ui import UiEnv
from tests.unit.ui.airflow_ui import ui_env as ui_env  # a fixture

pytestmark = pytest.mark.timeout(300)


def test_a_user_reads_their_teams_dags_only(ui_env: UiEnv) -> None:
    a, b = ui_env.dags["team_a"].dag_id, ui_env.dags["team_b"].dag_id
    alice, bob = ui_env.user("alice"), ui_env.user("bob")
    assert auth.may_read_runs(alice, a) and not auth.may_read_runs(alice, b)
    assert auth.readable(alice, [a, b, a]) == {a} and auth.readable(bob, [a, b]) == {b}
    auth.require_runs(bob, b)
    with pytest.raises(HTTPException) as refused:
        auth.require_runs(bob, a)
    assert refused.value.status_code == 403


def test_a_user_without_a_role_reads_nothing(ui_env: UiEnv) -> None:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    nobody = SimpleAuthManagerUser(username="nobody", role=None, teams=[ui_env.teams["team_a"]])
    assert auth.readable(nobody, [ui_env.dags["team_a"].dag_id]) == set()

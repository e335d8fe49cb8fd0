"""FlinkJobLink (``links/flink.py``): an operator persists the Flink UI page of the job it acted on; the link returns
it, through the real XCom API inside a task and through the UI's extra-link lookup on the serialized DAG, and is
empty for a task that stored nothing. A real DAG under ``dag.test()`` on the test metadata DB."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.links.flink import FlinkJobLink
from tests.dag_testing import register_dag

pytestmark = pytest.mark.timeout(300)

URL = "http://127.0.0.1:8081/#/job/running/a1b2c3d4e5f60718293a4b5c6d7e8f90/overview"


def test_the_link_is_the_job_page_the_operator_stored(airflow_db: Path) -> None:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import DAG, BaseOperator, task

    class ActsOnAJob(BaseOperator):
        operator_extra_links = (FlinkJobLink(),)

        def __init__(self, *, url: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.url = url

        def execute(self, context: Any) -> None:
            FlinkJobLink.persist(context, self.url)

    seen: dict[str, str] = {}
    dag_id = f"flink_job_link_{uuid.uuid4().hex[:6]}"
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        acted = ActsOnAJob(task_id="acted", url=URL)

        @task
        def links(**context: Any) -> None:
            ti = context["ti"]
            for task_id in ("acted", "links"):  # this task stored nothing
                key = TaskInstanceKey(ti.dag_id, task_id, ti.run_id, 1, -1)
                seen[task_id] = FlinkJobLink().get_link(context["dag"].get_task(task_id), ti_key=key)

        acted >> links()
    register_dag(dag, "flink-link-tests")
    dr = dag.test()
    assert {ti.task_id: ti.state for ti in dr.get_task_instances()} == {"acted": "success", "links": "success"}
    assert seen == {"acted": URL, "links": ""}

    from airflow.models.dagbag import DBDagBag
    from airflow.utils.session import create_session

    with create_session() as session:
        serialized = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
        assert serialized is not None
        by_task = {ti.task_id: ti for ti in dr.get_task_instances(session=session)}
        task_ = serialized.get_task("acted")
        assert "Flink Job" in task_.extra_links
        assert task_.get_extra_links(by_task["acted"], "Flink Job") == URL


def test_the_link_is_named_for_the_ui_and_keeps_its_own_xcom_key() -> None:
    link = FlinkJobLink()
    assert link.name == "Flink Job"
    assert link.xcom_key == FlinkJobLink().xcom_key and "FlinkJobLink" in link.xcom_key

"""ReplayReportLink on a CompareReplayOutputsOperator in a real DAG under dag.test() (the DAG and inputs of
``tests/unit/operators/test_compare.py``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.unit.operators.test_compare import build_dag, register_and_test, states
from tests.unit.operators.test_compare import runs as runs  # a fixture

pytestmark = pytest.mark.timeout(300)


def test_report_link_get_link_returns_the_report_url(airflow_db: Path, runs: Path) -> None:
    """ReplayReportLink.get_link() itself, called the way the task runner calls it (inside a task, through the
    real XCom API): empty before the comparison ran, the reader's report URL after it; and the UI's extra-link
    lookup on the serialized DAG (what the API server does) returns the same URL from the metadata DB."""
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import task

    from airflow_flink_replay.links.report import ReplayReportLink

    dag_id = f"issue7_compare_link_{uuid.uuid4().hex[:6]}"
    dag = build_dag(
        dag_id, runs / "candidate_ok.jsonl", runs, gate=True, report={"url": "https://reports.example/r?f={report}"}
    )
    seen: dict[str, Any] = {}

    def links(context: dict[str, Any]) -> dict[str, str]:
        ti = context["ti"]
        key = TaskInstanceKey(ti.dag_id, "compare", ti.run_id, 1, -1)
        operator = context["dag"].get_task("compare")
        return {
            "compare": ReplayReportLink().get_link(operator, ti_key=key),
            "own": ReplayReportLink().get_link(operator, ti_key=key._replace(task_id=ti.task_id)),
        }

    with dag:

        @task
        def before(**context: Any) -> None:
            seen["before"] = links(context)

        @task
        def after(**context: Any) -> None:
            seen["after"] = links(context)
            seen["summary"] = context["ti"].xcom_pull(task_ids="compare", key="comparison")

        compare = dag.get_task("compare")
        before() >> compare >> after()
    dr = register_and_test(dag)
    assert states(dr) == {"before": "success", "compare": "success", "after": "success", "record": "success"}

    summary = seen["summary"]
    assert summary["verdict"] == "PASS" and summary["report_uri"].endswith("/report.html")
    url = f"https://reports.example/r?f={summary['report_uri']}"
    assert seen["before"] == {"compare": "", "own": ""}  # nothing stored yet: an empty link, no error
    assert seen["after"] == {"compare": url, "own": ""}

    from airflow.models.dagbag import DBDagBag
    from airflow.utils.session import create_session

    with create_session() as session:
        serialized = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
        assert serialized is not None
        ti = next(t for t in dr.get_task_instances(session=session) if t.task_id == "compare")
        task_ = serialized.get_task("compare")
        assert "Replay Report" in task_.extra_links
        assert task_.get_extra_links(ti, "Replay Report") == url

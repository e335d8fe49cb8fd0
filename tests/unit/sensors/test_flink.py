"""FlinkJobSensor under dag.test() against the scripted Flink of ``tests/fake_flink.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fake_flink import JAVA_ERROR, JOB, FakeFlink
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)


def test_job_sensor_defers_and_links_the_job(
    fake: tuple[FakeFlink, str], airflow_db: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FlinkJobSensor under dag.test(): the deferral runs FlinkJobStateTrigger inline; the link is stored."""
    from datetime import datetime

    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG
    from airflow.utils.session import create_session

    from airflow_flink_replay.links.flink import FlinkJobLink
    from airflow_flink_replay.sensors.flink import FlinkJobSensor
    from tests.jobs.harness import run_dag_test, unique

    state, url = fake
    starting = {**JOB, "state": "INITIALIZING"}
    state.on("GET", "/jobs/j1", (200, starting), (200, starting), (200, JOB))
    state.on("GET", "/jobs/j2", (200, {**JOB, "jid": "j2", "state": "FAILED"}))
    state.on("GET", "/jobs/j2/exceptions", (200, {"exceptionHistory": {"entries": [{"stacktrace": JAVA_ERROR}]}}))
    conn_file = tmp_path / "conns.json"
    conn_file.write_text(json.dumps({"flink_fake": {"conn_type": "flink_rest", "host": url}}))
    # also as an env var: Airflow caches the secrets backends of the first dag.test() in a process
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_FAKE", json.dumps({"conn_type": "flink_rest", "host": url}))
    errors: list[str] = []
    dag_id = unique("cp-sensor")
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        FlinkJobSensor(task_id="wait_ok", job_id="j1", flink_conn_id="flink_fake", deferrable=True, poll_interval=0.05)
        FlinkJobSensor(
            task_id="wait_failed",
            job_id="j2",
            flink_conn_id="flink_fake",
            deferrable=True,
            on_failure_callback=lambda ctx: errors.append(str(ctx["exception"])),
        )
    dr = run_dag_test(dag, str(conn_file))
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states == {"wait_ok": "success", "wait_failed": "failed"}
    assert state.calls[("GET", "/jobs/j1")] >= 3  # polled through INITIALIZING by the trigger
    assert "Flink job j2 ended FAILED" in errors[0] and "Cannot map checkpoint/savepoint state" in errors[0]
    with create_session() as session:
        links = {
            x.task_id: XComModel.deserialize_value(x)
            for x in session.query(XComModel).filter_by(dag_id=dag_id, key=FlinkJobLink().xcom_key)
        }
    assert links == {
        "wait_ok": f"{url}/#/job/running/j1/overview",
        "wait_failed": f"{url}/#/job/completed/j2/overview",  # an ended job's page is under completed/
    }

"""The one Airflow environment of the local stack: the venv's bin first on PATH (``airflow standalone`` spawns
``airflow`` by name), the stack's connections, the spec, and the run record of a run found by its id."""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow_flink_replay.local.airflow_runner import (
    DAG_IDS,
    DAGS_FOLDER,
    airflow_env,
    find_run_record,
    scripts_dir,
)
from airflow_flink_replay.local.stack import StackInfo


def _stack(tmp_path: Path) -> StackInfo:
    conns = tmp_path / "connections.json"
    conns.write_text(json.dumps({"flink_default": {"conn_type": "flink", "host": "127.0.0.1", "port": 8081},
                                 "kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": "x:9092"}}}))
    return StackInfo(
        workdir=str(tmp_path), flink_home="/f", flink_conf_dir="/c", flink_python="/p", flink_rest_url="http://f",
        kafka_bootstrap="x:9092", chroma_host="127.0.0.1", chroma_port=8000, mem0_dir="/m", connector_jars=[],
        savepoint_dir="/s", checkpoint_dir="/k", java_home="/j", processes=[], env={"JAVA_HOME": "/j"},
        connections_file=str(conns),
    )


def test_the_venv_bin_comes_first_on_path_even_when_it_is_not_on_the_callers(tmp_path: Path) -> None:
    env = airflow_env(_stack(tmp_path), tmp_path / "home", tmp_path / "spec.yaml", base={"PATH": "/usr/bin:/bin"})
    assert env["PATH"].split(os.pathsep) == [str(scripts_dir()), "/usr/bin", "/bin"]
    assert (scripts_dir() / "airflow").exists()  # what `airflow standalone` looks up by name
    assert airflow_env(_stack(tmp_path), tmp_path, tmp_path, base={})["PATH"] == str(scripts_dir())


def test_the_stack_connections_spec_and_dags(tmp_path: Path) -> None:
    env = airflow_env(_stack(tmp_path), tmp_path / "home", tmp_path / "spec.yaml", base={"PYTHONPATH": "/old"},
                      python_path=[Path("/mine")])
    assert json.loads(env["AIRFLOW_CONN_FLINK_DEFAULT"])["port"] == 8081
    assert json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]["bootstrap.servers"] == "x:9092"
    assert env["FLINK_REPLAY_SPEC"] == str(tmp_path / "spec.yaml")
    assert env["AIRFLOW_HOME"] == str(tmp_path / "home")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(DAGS_FOLDER)
    assert env["JAVA_HOME"] == "/j" and env["PYTHONPATH"] == f"/mine{os.pathsep}/old"
    assert {f"{dag_id}.py" for dag_id in DAG_IDS.values()} <= {p.name for p in DAGS_FOLDER.glob("*.py")}


def test_the_run_record_is_found_by_run_id(tmp_path: Path) -> None:
    for tag, run_id in (("a", "manual__1"), ("b", "manual__2")):
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "run_record.json").write_text(json.dumps({"run_id": run_id, "verdict": tag}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "run_record.json").write_text("{half")
    path, record = find_run_record(tmp_path, "manual__2")
    assert path == str(tmp_path / "b" / "run_record.json") and record == {"run_id": "manual__2", "verdict": "b"}
    assert find_run_record(tmp_path, "manual__3") == (None, None)
    assert find_run_record(tmp_path / "absent", "manual__1") == (None, None)


def test_a_home_migrated_by_this_airflow_is_not_migrated_again(tmp_path: Path) -> None:
    from airflow_flink_replay.local.airflow_runner import AirflowRunner

    home = tmp_path / "home"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
    log = tmp_path / "airflow.log"
    runner = AirflowRunner(env, log)
    runner.migrate()  # a real `airflow db migrate`: creates the sqlite DB
    assert (home / "airflow.db").exists() and list(home.glob(".migrated-*"))
    runner.migrate()
    assert log.read_text().count("$ airflow db migrate") == 1
    (home / "airflow.db").unlink()  # a home whose DB is gone is migrated again, whatever the marker says
    runner.migrate()
    assert log.read_text().count("$ airflow db migrate") == 2 and (home / "airflow.db").exists()


def test_the_ui_plugin_may_serve_the_stacks_runs_and_the_specs(tmp_path: Path) -> None:
    """``[flink_replay] runs_locations`` of the stack's Airflow: its runs folder, and the spec's runs_uri."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("runs_uri: s3://bucket/runs\n")
    env = airflow_env(_stack(tmp_path), tmp_path / "home", spec, base={})
    assert env["AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS"] == f"file://{tmp_path / 'runs'},s3://bucket/runs"
    missing = airflow_env(_stack(tmp_path), tmp_path / "home", tmp_path / "absent.yaml", base={})
    assert missing["AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS"] == f"file://{tmp_path / 'runs'}"

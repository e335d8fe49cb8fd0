"""The provider is registered with Airflow and its connection types are accepted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from airflow_flink_replay.provider_info import get_provider_info


def _airflow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=180,
    )


def test_provider_info_names_the_distribution_and_connection_types() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-flink-replay"
    types = {c["connection-type"]: c["hook-class-name"] for c in info["connection-types"]}
    assert types == {
        "flink_rest": "airflow_flink_replay.hooks.flink_rest.FlinkRestHook",
        "mem0": "airflow_flink_replay.hooks.mem0.Mem0Hook",
    }


def test_airflow_lists_the_provider_and_its_connection_types(airflow_db) -> None:
    listed = _airflow("providers", "list", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    names = {p["package_name"] for p in json.loads(listed.stdout)}
    assert "airflow-flink-replay" in names

    hooks = _airflow("providers", "hooks", "--output", "json")
    assert hooks.returncode == 0, hooks.stderr
    conn_types = {h["connection_type"] for h in json.loads(hooks.stdout)}
    assert {"flink_rest", "mem0"} <= conn_types


def test_connections_add_accepts_flink_rest_and_mem0(airflow_db) -> None:
    added = _airflow(
        "connections", "add", "flink_test_ui",
        "--conn-type", "flink_rest",
        "--conn-host", "http://127.0.0.1:8081",
        "--conn-extra", json.dumps({"verify": False, "timeout": 10}),
    )
    assert added.returncode == 0, added.stderr
    assert "Successfully added" in added.stdout

    mem0 = _airflow(
        "connections", "add", "mem0_test_ui",
        "--conn-type", "mem0",
        "--conn-extra", json.dumps({"vector_store": {"provider": "chroma", "config": {"host": "127.0.0.1"}}}),
    )
    assert mem0.returncode == 0, mem0.stderr

    shown = _airflow("connections", "get", "flink_test_ui", "--output", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)[0]["conn_type"] == "flink_rest"


def test_connection_form_behaviour_is_declared() -> None:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
    from airflow_flink_replay.hooks.mem0 import Mem0Hook

    flink = FlinkRestHook.get_ui_field_behaviour()
    assert flink["placeholders"]["host"].startswith("http")
    mem0 = Mem0Hook.get_ui_field_behaviour()
    assert "host" in mem0["hidden_fields"]

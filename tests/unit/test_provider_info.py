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
        "connections",
        "add",
        "flink_test_ui",
        "--conn-type",
        "flink_rest",
        "--conn-host",
        "http://127.0.0.1:8081",
        "--conn-extra",
        json.dumps({"verify": False, "timeout": 10}),
    )
    assert added.returncode == 0, added.stderr
    assert "Successfully added" in added.stdout

    mem0 = _airflow(
        "connections",
        "add",
        "mem0_test_ui",
        "--conn-type",
        "mem0",
        "--conn-extra",
        json.dumps({"vector_store": {"provider": "chroma", "config": {"host": "127.0.0.1"}}}),
    )
    assert mem0.returncode == 0, mem0.stderr

    shown = _airflow("connections", "get", "flink_test_ui", "--output", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)[0]["conn_type"] == "flink_rest"


def test_connection_forms_reach_airflows_ui_metadata(airflow_db) -> None:
    """Airflow 3.2+ builds the connection form from the provider info (not from the hooks): what the UI's
    ``/ui/connections/hook_meta`` serves lists both types with their labels, hidden fields and extra fields."""
    script = (
        "import json\n"
        "from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService\n"
        "print(json.dumps({m.connection_type: m.model_dump(mode='json') for m in HookMetaService.hook_meta_data()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=os.environ.copy(), timeout=180
    )
    assert done.returncode == 0, done.stderr
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    flink = meta["flink_rest"]
    assert flink["hook_name"] == "Flink REST"
    assert flink["standard_fields"]["host"]["title"] == "REST base URL or host"
    assert flink["standard_fields"]["host"]["placeholder"] == "http://127.0.0.1:8081"
    extra = flink["extra_fields"]
    assert extra["bearer_token"]["schema"]["format"] == "password"  # masked in the form
    assert extra["verify"]["value"] is True and extra["timeout"]["value"] == 30
    mem0 = meta["mem0"]
    assert mem0["hook_name"] == "Mem0"
    assert all(mem0["standard_fields"][f]["hidden"] for f in ("host", "port", "login", "password"))

    behaviours = _airflow("providers", "behaviours", "--output", "json")
    assert behaviours.returncode == 0, behaviours.stderr
    assert {"flink_rest", "mem0"} <= {b["field_behaviours"] for b in json.loads(behaviours.stdout)}

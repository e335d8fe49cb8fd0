"""The provider registry: Airflow reads it through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_flink_replay import __version__

# The connection forms, declared the Airflow 3.2+ way (read by the API server without importing the hooks).
FLINK_REST_CONNECTION: dict[str, Any] = {
    "connection-type": "flink_rest",
    "hook-class-name": "airflow_flink_replay.hooks.flink_rest.FlinkRestHook",
    "hook-name": "Flink REST",
    "ui-field-behaviour": {
        "hidden-fields": [],
        "relabeling": {"host": "REST base URL or host", "login": "Username (basic auth)"},
        "placeholders": {
            "host": "http://127.0.0.1:8081",
            "schema": "http",
            "port": "8081",
            "extra": '{"bearer_token": "...", "verify": true, "timeout": 30}',
        },
    },
    "conn-fields": {
        "bearer_token": {
            "label": "Bearer token",
            "description": "Sent as 'Authorization: Bearer ...' (instead of basic auth); never logged.",
            "schema": {"type": ["string", "null"], "format": "password"},
        },
        "verify": {
            "label": "Verify TLS",
            "description": "Verify the server certificate (https). A CA bundle path goes in the extra JSON.",
            "schema": {"type": ["boolean", "null"], "default": True},
        },
        "timeout": {
            "label": "Timeout (s)",
            "description": "Per-call timeout in seconds.",
            "schema": {"type": ["number", "null"], "default": 30, "minimum": 1},
        },
        "retries": {
            "label": "Retries",
            "description": "Retries on connection errors and 502/503/504 (idempotent calls only).",
            "schema": {"type": ["integer", "null"], "default": 3, "minimum": 0},
        },
    },
}
MEM0_CONNECTION: dict[str, Any] = {
    "connection-type": "mem0",
    "hook-class-name": "airflow_flink_replay.hooks.mem0.Mem0Hook",
    "hook-name": "Mem0",
    "ui-field-behaviour": {
        "hidden-fields": ["host", "schema", "login", "password", "port"],
        "relabeling": {"extra": "Mem0 config (JSON)"},
        "placeholders": {
            "extra": '{"vector_store": {"provider": "chroma", "config": {"host": "127.0.0.1", '
            '"port": 8000, "collection_name": "flink_agents_mem0_ltm"}}}'
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    """Return the provider's metadata: connection types, hooks, triggers, extra links."""
    return {
        "package-name": "airflow-flink-replay",
        "name": "Flink Agents Replay",
        "description": "Replay a changed Flink Agents job against production state before shipping it.",
        "versions": [__version__],
        "connection-types": [FLINK_REST_CONNECTION, MEM0_CONNECTION],
        "hooks": [
            {
                "integration-name": "Flink Agents Replay",
                "python-modules": [
                    "airflow_flink_replay.hooks.flink_rest",
                    "airflow_flink_replay.hooks.mem0",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Flink Agents Replay",
                "python-modules": ["airflow_flink_replay.triggers.flink", "airflow_flink_replay.triggers.kafka"],
            }
        ],
        "extra-links": [
            "airflow_flink_replay.links.flink.FlinkJobLink",
            "airflow_flink_replay.links.report.ReplayReportLink",
        ],
    }

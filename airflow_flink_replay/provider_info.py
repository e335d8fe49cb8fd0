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


#: The UI plugin's settings, as Airflow's config lists them (``airflow config list``) and reads them.
UI_CONFIG: dict[str, Any] = {
    "flink_replay": {
        "description": "Settings of the provider's UI plugin (the reports and the Replays pages in the API server).\n",
        "options": {
            "runs_locations": {
                "description": "Comma-separated URI prefixes (or absolute local paths) under which the API server "
                "may read a replay run's files: the reports, summary.json, junit.xml and run_record.json. Give "
                "the specs' runs_uri (an object store's with its connection, as in s3://aws_replay@bucket/runs). "
                "Empty (the default): nothing is read, and the pages say so. A file outside them, one reached "
                "through a symlink that leads outside, or a URI with a '..' segment is refused (403).\n",
                "version_added": "0.1.0",
                "type": "string",
                "example": "file:///data/replay-runs,s3://aws_default@replays/runs",
                "default": "",
            }
        },
    }
}


def get_provider_info() -> dict[str, Any]:
    """Return the provider's metadata: connection types, hooks, triggers, extra links, the UI plugin and its
    config section."""
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
        "config": UI_CONFIG,
    }

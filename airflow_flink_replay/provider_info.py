"""The provider registry: Airflow reads it through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_flink_replay import __version__


def get_provider_info() -> dict[str, Any]:
    """Return the provider's metadata: connection types, hooks, triggers, extra links."""
    return {
        "package-name": "airflow-flink-replay",
        "name": "Flink Agents Replay",
        "description": "Replay a changed Flink Agents job against production state before shipping it.",
        "versions": [__version__],
        "connection-types": [
            {
                "connection-type": "flink_rest",
                "hook-class-name": "airflow_flink_replay.hooks.flink_rest.FlinkRestHook",
            },
            {
                "connection-type": "mem0",
                "hook-class-name": "airflow_flink_replay.hooks.mem0.Mem0Hook",
            },
        ],
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

"""Hook for Mem0 long-term memory (connection type ``mem0``)."""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk.bases.hook import BaseHook


class Mem0Hook(BaseHook):
    """Builds ``mem0.Memory`` from the mem0 config stored as JSON in the connection's extra."""

    conn_name_attr = "mem0_conn_id"
    default_conn_name = "mem0_default"
    conn_type = "mem0"
    hook_name = "Mem0"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return the connection form's field behaviour: only the extra (mem0 config JSON) is used."""
        return {
            "hidden_fields": ["host", "schema", "login", "password", "port"],
            "relabeling": {"extra": "Mem0 config (JSON)"},
            "placeholders": {
                "extra": '{"vector_store": {"provider": "chroma", "config": {"host": "127.0.0.1", '
                '"port": 8000, "collection_name": "flink_agents_mem0_ltm"}}}'
            },
        }

    def __init__(self, mem0_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mem0_conn_id = mem0_conn_id

    def get_config(self) -> dict[str, Any]:
        """Return the mem0 config dict from the connection's extra."""
        conn = self.get_connection(self.mem0_conn_id)
        extra = conn.extra_dejson if conn.extra else {}
        config = extra.get("config", extra)
        if isinstance(config, str):
            config = json.loads(config)
        return dict(config)

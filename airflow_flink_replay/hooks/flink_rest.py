"""Hook for the Flink REST API (connection type ``flink_rest``)."""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.hook import BaseHook


class FlinkRestHook(BaseHook):
    """Talks to a Flink cluster's REST endpoint (JobManager, port 8081 by default).

    Connection fields: ``host`` is the REST base URL (``http://127.0.0.1:8081``) or a host name with
    ``schema`` (http/https) and ``port``; ``login``/``password`` give basic auth; extra
    ``{"bearer_token": ..., "verify": true|false|"/ca.pem", "timeout": 30}``.
    """

    conn_name_attr = "flink_conn_id"
    default_conn_name = "flink_default"
    conn_type = "flink_rest"
    hook_name = "Flink REST"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return the connection form's field behaviour."""
        return {
            "hidden_fields": [],
            "relabeling": {"host": "REST base URL or host", "login": "Username (basic auth)"},
            "placeholders": {
                "host": "http://127.0.0.1:8081",
                "schema": "http",
                "port": "8081",
                "extra": '{"bearer_token": "...", "verify": true, "timeout": 30}',
            },
        }

    def __init__(self, flink_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flink_conn_id = flink_conn_id

    @property
    def base_url(self) -> str:
        """The REST base URL, without a trailing slash."""
        conn = self.get_connection(self.flink_conn_id)
        return rest_base_url(conn.host or "127.0.0.1", conn.schema, conn.port)


def rest_base_url(host: str, schema: str | None, port: int | None) -> str:
    """Build the REST base URL from connection fields (``host`` may already be a URL)."""
    if "://" in host:
        return host.rstrip("/")
    scheme = schema or "http"
    return f"{scheme}://{host}:{port or 8081}"

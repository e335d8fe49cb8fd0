"""The provider's Airflow plugin: the plugin's FastAPI app mounted in the API server at ``/flink-replay``, and a
"Replays" entry in the UI's Browse menu.

Airflow finds it through the ``airflow.plugins`` entry point (``pyproject.toml``), and lists it in the provider
info's ``plugins`` (what Airflow loads from providers when ``[core] lazy_discover_providers`` is off: the Apache
Kafka provider declares its plugin both ways too; with that setting off, Airflow keeps the first registration and
logs the second as already registered, among the plugin import errors).

Plugins are imported by every Airflow process, each task's included (for their macros and listeners), while only
the API server serves the app: :class:`LazyApp` builds it (FastAPI, Airflow's API security, jinja2) at the first
request, so nothing else pays for those imports.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.sdk.plugins_manager import AirflowPlugin

from airflow_flink_replay.ui.paths import URL_PREFIX, api_root_path


class LazyApp:
    """An ASGI app that builds the plugin's FastAPI app (:func:`airflow_flink_replay.ui.app.create_app`) on its
    first request and hands every request to it."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    @property
    def app(self) -> Any:
        """The plugin's FastAPI app (built at the first use)."""
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from airflow_flink_replay.ui.app import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def replays_view() -> dict[str, Any]:
    """The UI's menu entry for the Replays page. No ``url_route``: the UI would frame the page in an iframe sandboxed
    to ``allow-forms``, where its links to DAG runs could neither leave the frame nor open a tab; as a link it
    opens in a tab of its own. The ``href`` carries ``[api] base_url``'s path (the UI resolves it on its origin)."""
    return {
        "name": "Replays",
        "href": f"{api_root_path()}{URL_PREFIX}/replays",
        "destination": "nav",
        "category": "browse",
    }


class FlinkReplayPlugin(AirflowPlugin):
    """Serves a replay run's reports behind Airflow's login and DAG permissions, and the Replays pages."""

    name = "flink_replay"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Flink Replay"}]
    external_views = [replays_view()]

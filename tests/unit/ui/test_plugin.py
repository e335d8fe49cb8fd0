"""The plugin registers as Airflow expects: a valid ``AirflowPlugin`` whose app Airflow's API server mounts at
``/flink-replay`` and whose "Replays" menu entry it lists, found through the ``airflow.plugins`` entry point
(declared in ``pyproject.toml``) and through the provider info's ``plugins``; importing it (every Airflow process
does) loads neither FastAPI nor Airflow's API security."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from airflow_flink_replay.provider_info import get_provider_info
from airflow_flink_replay.ui.plugin import FlinkReplayPlugin, LazyApp, replays_view

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "airflow_flink_replay.ui.plugin:FlinkReplayPlugin"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def test_the_plugin_is_valid_for_airflow() -> None:
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse
    from airflow.plugins_manager import is_valid_plugin
    from airflow.sdk.plugins_manager import is_valid_plugin as sdk_is_valid_plugin

    assert is_valid_plugin(FlinkReplayPlugin) and sdk_is_valid_plugin(FlinkReplayPlugin)
    (app,) = FlinkReplayPlugin.fastapi_apps
    assert app["url_prefix"] == "/flink-replay" and app["name"] == "Flink Replay" and isinstance(app["app"], LazyApp)
    (view,) = FlinkReplayPlugin.external_views
    parsed = ExternalViewResponse.model_validate(view)
    assert (parsed.name, parsed.destination, parsed.category, parsed.url_route) == ("Replays", "nav", "browse", None)
    assert parsed.href.endswith("/flink-replay/replays")


def test_the_menu_entry_carries_base_urls_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/team-x/")
    assert replays_view()["href"] == "/team-x/flink-replay/replays"


def test_the_lazy_app_is_built_once_at_its_first_request() -> None:
    from fastapi.testclient import TestClient

    lazy = LazyApp()
    assert lazy._app is None
    assert TestClient(lazy).get("/replays").status_code == 401  # Airflow's login is required
    built = lazy.app
    assert built is lazy.app and built.title == "Flink Replay"


def test_importing_the_plugin_loads_no_api_server_code() -> None:
    script = (
        "import sys, json, airflow_flink_replay.ui.plugin\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('fastapi', 'airflow.api_fastapi.core_api',"
        " 'airflow_flink_replay.ui.app')))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ.copy(),
                          timeout=120, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_pyproject_and_provider_info_declare_the_plugin() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["airflow.plugins"]
    assert declared == {"flink_replay": PLUGIN}
    assert EntryPoint("flink_replay", PLUGIN, "airflow.plugins").load() is FlinkReplayPlugin
    info = get_provider_info()
    assert "plugins" not in info  # the entry point registers it in every mode: twice would be an import error
    option = info["config"]["flink_replay"]["options"]["runs_locations"]
    assert option["default"] == "" and option["type"] == "string"


_SERVE = r"""
import json, sys
from fastapi.testclient import TestClient
from starlette.routing import Mount
from airflow import plugins_manager
from airflow.api_fastapi.app import create_app, get_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

app = create_app()
mounts = [r.path for r in app.routes if isinstance(r, Mount)]
client = TestClient(app)
token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
plugins = client.get("/api/v2/plugins", headers={"Authorization": f"Bearer {token}"}).json()["plugins"]
ours = [p for p in plugins if p["name"] == "flink_replay"]
print(json.dumps({
    "mounts": mounts,
    "anonymous": client.get("/flink-replay/replays").status_code,
    "admin": client.get("/flink-replay/replays", headers={"Authorization": f"Bearer {token}"}).status_code,
    "plugin": ours[0] if ours else None,
    "import_errors": {k: v for k, v in plugins_manager.get_import_errors().items() if "flink" in k.lower()},
}))
"""


def _installed() -> bool:
    """Whether an installed distribution declares the plugin's entry point (``pip install -e .`` does)."""
    from importlib.metadata import entry_points

    return any(ep.value == PLUGIN for ep in entry_points(group="airflow.plugins"))


def _declared_in(folder: Path) -> list[str]:
    """``[folder]`` holding a distribution that declares the entry point, when none is installed (else ``[]``)."""
    if _installed():
        return []
    dist = folder / "afr_ui_entry_point-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: afr-ui-entry-point\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[airflow.plugins]\nflink_replay = {PLUGIN}\n")
    return [str(folder), str(ROOT)]


def _serve(extra_env: dict[str, str], python_path: list[str], cwd: Path) -> dict[str, object]:
    """Airflow's API server app built in a fresh Python, run in ``cwd`` (not the checkout: Airflow does not dedupe
    plugins, and an installed checkout found again through the current folder registers twice)."""
    env = {**os.environ, **extra_env, "PYTHONPATH": os.pathsep.join(python_path)}
    env["AIRFLOW__CORE__AUTH_MANAGER"] = SIMPLE_AUTH_MANAGER
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = "admin:admin"
    done = subprocess.run([sys.executable, "-c", _SERVE], capture_output=True, text=True, env=env, timeout=240,
                          cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _check_served(found: dict[str, object]) -> None:
    assert "/flink-replay" in found["mounts"]  # type: ignore[operator]
    assert (found["anonymous"], found["admin"]) == (401, 200)
    plugin = found["plugin"]
    assert isinstance(plugin, dict) and plugin["fastapi_apps"][0]["url_prefix"] == "/flink-replay"
    assert [v["name"] for v in plugin["external_views"]] == ["Replays"]
    assert found["import_errors"] == {}


@pytest.mark.timeout(300)
def test_airflows_api_server_mounts_it_from_the_entry_point(airflow_db: Path, tmp_path: Path) -> None:
    """Airflow's own ``create_app``, plugins discovered the default way: the installed distribution's
    ``airflow.plugins`` entry point of ``pyproject.toml`` (written here as installed metadata when this checkout is
    not installed)."""
    installed = _installed()
    found = _serve({}, _declared_in(tmp_path), tmp_path)
    _check_served(found)
    source = str(found["plugin"]["source"])  # type: ignore[index]
    assert ("airflow-flink-replay" if installed else "afr-ui-entry-point") in source, source


@pytest.mark.timeout(300)
def test_airflows_api_server_mounts_it_once_with_eager_provider_discovery(airflow_db: Path, tmp_path: Path) -> None:
    """With ``[core] lazy_discover_providers`` off, the entry point still registers it, once (no import error)."""
    _check_served(_serve({"AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False"}, _declared_in(tmp_path), tmp_path))

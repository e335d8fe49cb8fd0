"""The plugin's FastAPI app, mounted by the API server at ``/flink-replay``
(:data:`~airflow_flink_replay.ui.paths.URL_PREFIX`): a run's files and the Replays pages.

Every route needs a login (Airflow's ``GetUserDep``: 401 without one) and permission to read the DAG's runs
(Airflow's ``requires_access_dag`` for the files, :mod:`.auth` for the pages: 403 without it). A file is read only
under an allowed runs location (:mod:`.locations`: 403 outside, with the reason) and only by one of the four names
of ``RUN_FILES`` (404 for any other). Every answer carries ``X-Content-Type-Options: nosniff``, ``Cache-Control:
private, no-store`` and a Content-Security-Policy that allows no script.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from airflow_flink_replay.exceptions import RunFileRefusedError
from airflow_flink_replay.ui import pages, paths, run_files, views
from airflow_flink_replay.ui.locations import configured_locations, shown

log = logging.getLogger(__name__)

#: Headers of every answer: no content sniffing, nothing cached beyond the user's own browser session.
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "private, no-store",
    "Referrer-Policy": "same-origin",
}
#: The report's Content-Security-Policy: it is one self-contained file with an inline ``<style>`` and ``style``
#: attributes (the fields' bars), no script, no image but ``data:``, no link out; ``sandbox`` gives it no origin.
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'; sandbox"
)
#: The JSON and XML files' policy: nothing runs or loads if a browser renders them.
DATA_CSP = "default-src 'none'; frame-ancestors 'self'; sandbox"
#: How many replay runs the Replays page reads by default, and at most.
DEFAULT_RUNS, MAX_RUNS = 200, 2000

router = APIRouter()


def _airflow_root(request: Request) -> str:
    """The API server's path prefix, from where this app is mounted (``<root>/flink-replay``)."""
    return str(request.scope.get("root_path", "")).rstrip("/").removesuffix(paths.URL_PREFIX)


def _page(html: str) -> HTMLResponse:
    return HTMLResponse(html, headers={"Content-Security-Policy": pages.PAGE_CSP})


class SecurityHeaders:
    """ASGI middleware: every answer of the app (errors too, 401 and 403 included) gets :data:`COMMON_HEADERS`,
    and :data:`DATA_CSP` unless the route set its own Content-Security-Policy."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                defaults = {**COMMON_HEADERS, "Content-Security-Policy": DATA_CSP}
                headers += [(k.lower().encode(), v.encode()) for k, v in defaults.items()
                            if k.lower().encode() not in present]  # fmt: skip
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


@router.get("/", include_in_schema=False)
def index(request: Request) -> RedirectResponse:
    """The plugin's root: the Replays page."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}/replays", status_code=status.HTTP_303_SEE_OTHER)


@router.get(
    "/runs/{dag_id}/{run_id:path}/{name}",
    dependencies=[Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))],
)
def run_file(dag_id: str, run_id: str, name: str) -> Response:
    """One of a run's files (``report.html``, ``summary.json``, ``junit.xml``, ``run_record.json``), read-only."""
    if name not in paths.RUN_FILES:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"not a run file: one of {', '.join(paths.RUN_FILES)}")
    from airflow.utils.session import create_session

    with create_session() as session:
        uri = run_files.file_uri(session, dag_id, run_id, name)
    if uri is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"this run has no {name} (yet)")
    try:
        stream = run_files.open_run_file(uri, configured_locations())
    except RunFileRefusedError as err:
        log.warning("flink-replay UI: %s of %s/%s: %s", name, dag_id, run_id, err)
        raise HTTPException(status.HTTP_403_FORBIDDEN, str(err)) from None
    except OSError as err:
        log.warning("flink-replay UI: cannot read %s of %s/%s at %s: %s", name, dag_id, run_id, shown(uri),
                    type(err).__name__)  # fmt: skip
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"the run's {name} cannot be read") from None
    policy = REPORT_CSP if name == "report.html" else DATA_CSP
    return StreamingResponse(
        run_files.chunks(stream), media_type=paths.RUN_FILES[name], headers={"Content-Security-Policy": policy}
    )


@router.get("/replays", response_class=HTMLResponse)
def replays(
    request: Request,
    user: GetUserDep,
    limit: Annotated[int, Query(ge=1, le=MAX_RUNS)] = DEFAULT_RUNS,
    dag_id: Annotated[list[str] | None, Query()] = None,
) -> HTMLResponse:
    """Every production's replay runs the user may read, with charts over time (``dag_id``, repeatable: of those
    DAGs only)."""
    view = views.replays_view(user, limit, dag_id or ())
    return _page(pages.render_replays(view, root=_airflow_root(request), user=user.get_name()))


@router.get("/replays/compare", response_class=HTMLResponse)
def compare(request: Request, user: GetUserDep, a: str | None = None, b: str | None = None) -> HTMLResponse:
    """Two runs side by side (``a`` and ``b``: ``<dag_id>/<run_id>``)."""
    try:
        view: Any = views.compare_view(user, a or "", b or "")
    except ValueError:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, "give two runs: ?a=<dag_id>/<run_id>&b=<dag_id>/<run_id>"
        ) from None
    return _page(pages.render_compare(view, root=_airflow_root(request), user=user.get_name()))


def create_app() -> FastAPI:
    """The plugin's app (no OpenAPI pages: it serves files and HTML, not an API)."""
    app = FastAPI(title="Flink Replay", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(router)
    app.add_middleware(SecurityHeaders)
    return app

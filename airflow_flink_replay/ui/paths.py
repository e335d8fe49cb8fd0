"""The plugin's URL scheme: where the API server serves a run's files and the Replays pages.

A leaf that imports Airflow only inside :func:`api_root_path`: the comparison operator builds its extra link with
it on the worker, the plugin's app routes by it in the API server, so both name one scheme.

- ``<root>/flink-replay/runs/<dag_id>/<run_id>/<name>``: one of :data:`RUN_FILES` of a DAG run;
- ``<root>/flink-replay/replays``: every production's runs; ``<root>/flink-replay/replays/compare?a=..&b=..``: two
  runs side by side (``a`` and ``b`` are ``<dag_id>/<run_id>``).

``<root>`` is the path of ``[api] base_url`` (empty when the API server is at the host's root).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

#: Where the plugin's FastAPI app is mounted in the API server.
URL_PREFIX = "/flink-replay"

#: The files of a run the plugin serves, by name, with their content type. Nothing else is ever served.
RUN_FILES: dict[str, str] = {
    "report.html": "text/html; charset=utf-8",
    "summary.json": "application/json",
    "junit.xml": "application/xml",
    "run_record.json": "application/json",
}

#: The comparison's XCom key that holds each report's URI (``run_record.json`` is in the run folder instead).
REPORT_URI_KEYS: dict[str, str] = {
    "report.html": "report_uri",
    "summary.json": "summary_uri",
    "junit.xml": "junit_uri",
}


def api_root_path(base_url: str | None = None) -> str:
    """The path the API server is served under, without a trailing slash (``""`` at the host's root): the path of
    ``base_url``, by default Airflow's ``[api] base_url``."""
    if base_url is None:
        from airflow.configuration import conf

        base_url = conf.get("api", "base_url", fallback="") or ""
    return urlsplit(base_url).path.rstrip("/")


def run_file_url(dag_id: str, run_id: str, name: str = "report.html", *, root: str | None = None) -> str:
    """The URL path of one of a run's files, ``dag_id`` and ``run_id`` quoted (a run id holds ``:`` and ``+``).
    ``root``: the API server's path (default: :func:`api_root_path`)."""
    if name not in RUN_FILES:
        raise ValueError(f"not a run file the plugin serves: {name!r} (one of {', '.join(RUN_FILES)})")
    root = api_root_path() if root is None else root
    return f"{root}{URL_PREFIX}/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{name}"


def replays_url(*, root: str | None = None) -> str:
    """The URL path of the Replays page."""
    return f"{api_root_path() if root is None else root}{URL_PREFIX}/replays"


def dag_run_url(dag_id: str, run_id: str, *, root: str) -> str:
    """The URL path of a DAG run's page in Airflow's own UI."""
    return f"{root}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"

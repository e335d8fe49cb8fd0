"""The plugin's HTML pages, rendered server-side with jinja2 from the view models of :mod:`.views`: plain HTML
and inline SVG in the report's style (its CSS, ``core/compare/templates/report.css``, is included, not copied), no
script and nothing fetched from elsewhere, so the pages work under :data:`PAGE_CSP`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jinja2

from airflow_flink_replay.ui import paths
from airflow_flink_replay.ui.charts import format_value

#: The pages' Content-Security-Policy: their own inline style only (no script at all), forms to this server.
PAGE_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'self'"
)

_env = jinja2.Environment(
    loader=jinja2.ChoiceLoader(
        [
            jinja2.PackageLoader("airflow_flink_replay.ui", "templates"),
            jinja2.PackageLoader("airflow_flink_replay.core.compare", "templates"),  # report.css
        ]
    ),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["rate"] = lambda v: "—" if v is None else format_value(float(v), "%")
_env.filters["secs"] = lambda v: "—" if v is None else format_value(float(v), "s")


def _links(root: str) -> dict[str, Any]:
    """The URL builders the templates use, for an API server under ``root``."""
    return {
        "root": root,
        "replays_url": paths.replays_url(root=root),
        "file_url": lambda run, name: paths.run_file_url(run.dag_id, run.run_id, name, root=root),
        "dag_run_url": lambda run: paths.dag_run_url(run.dag_id, run.run_id, root=root),
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def render_replays(view: Any, *, root: str, user: str) -> str:
    """The Replays page of a :class:`~airflow_flink_replay.ui.views.ReplaysView`, for an API server under
    ``root``, shown to ``user`` (a name)."""
    return _env.get_template("replays.html.j2").render(v=view, user=user, **_links(root))


def render_compare(view: Any, *, root: str, user: str) -> str:
    """The side-by-side page of a :class:`~airflow_flink_replay.ui.views.CompareView`."""
    return _env.get_template("compare.html.j2").render(v=view, user=user, **_links(root))

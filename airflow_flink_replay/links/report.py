"""Extra link: the HTML report of a replay comparison."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class ReplayReportLink(BaseOperatorLink):
    """Links a comparison task to its report.html. The operator stores the URL with :meth:`persist`: the report's
    page in the Airflow UI, served by the provider's plugin (``/flink-replay/runs/<dag_id>/<run_id>/report.html``,
    :mod:`airflow_flink_replay.ui.paths`), or the spec's ``report.url``. Airflow 3's UI shows an extra link only
    when it is on its own origin or ``http(s)``/``mailto``: a ``file://`` or ``s3://`` URI would not be shown."""

    name = "Replay Report"

    @classmethod
    def persist(cls, context: Any, url: str) -> None:
        """Store the report URL for this task instance."""
        context["ti"].xcom_push(key=cls().xcom_key, value=url)

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the comparison wrote its report."""
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

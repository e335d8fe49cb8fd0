"""Extra link: the Flink web UI page of the job an operator acted on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class FlinkJobLink(BaseOperatorLink):
    """Links a task to the Flink UI page of its job. The operator stores the URL with :meth:`persist`."""

    name = "Flink Job"

    @classmethod
    def persist(cls, context: Any, url: str) -> None:
        """Store the job page URL for this task instance (no credentials: the URL is the REST base)."""
        context["ti"].xcom_push(key=cls().xcom_key, value=url)

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the task acted on a job."""
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

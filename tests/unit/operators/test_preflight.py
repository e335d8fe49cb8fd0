"""ReplayPreflightOperator with a stubbed Flink hook: a refusal is a finding no retry can change, so it fails
the task without retrying (``AirflowFailException``), listing every problem."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.operators.preflight import ReplayPreflightOperator
from tests.unit.core.test_replay_spec import _spec
from tests.unit.operators.stubs import StubFlinkHook, job


def test_a_refused_preflight_fails_without_retry(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    op = ReplayPreflightOperator(task_id="preflight", spec=spec, retries=2)
    op.__dict__["hook"] = StubFlinkHook([job("a" * 32, "some-other-job")])  # production's job is not running
    monkeypatch.setattr(ReplayPreflightOperator, "_topics", lambda self, s: set())
    with pytest.raises(AirflowFailException, match="replay preflight refused:"):
        op.execute({"run_id": "manual__1", "dag": type("D", (), {"dag_id": "dag"})(), "ti": None})

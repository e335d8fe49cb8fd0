"""The local recycling policy (`LocalStack.recycle_if_worn`) against Flink's JobManager metrics.

Flink is the scripted HTTP server of ``tests/fake_flink.py`` (a fake: the policy's subject is the decision
from the metrics; the real recycle is exercised by the integration session between modules). Flink's REST
API serves a cached copy of the metrics and refreshes it in the background, so the first answer may be old:
a reading far above the recycling line is trusted at once, one near it is read again after the refresh.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_flink_replay.local.stack import LocalStack, StackConfig
from tests.fake_flink import FakeFlink
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)

MB = 2**20


def _metrics(used_mb: float, max_mb: float = 1024) -> tuple[int, Any]:
    return 200, [{"id": "Status.JVM.Memory.Metaspace.Used", "value": str(used_mb * MB)},
                 {"id": "Status.JVM.Memory.Metaspace.Max", "value": str(max_mb * MB)}]


@pytest.fixture
def stack_on(fake: tuple[FakeFlink, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A LocalStack whose cluster answers from the fake; its recycles are recorded, not carried out."""
    state, url = fake
    local = LocalStack(StackConfig(workdir=tmp_path))
    monkeypatch.setattr(local, "info", lambda: SimpleNamespace(rest_url=lambda cluster: url))
    local.recycled = []  # type: ignore[attr-defined]
    monkeypatch.setattr(local, "recycle_cluster", lambda cluster="replay": local.recycled.append(cluster))
    state.on("GET", "/jobs/overview", (200, {"jobs": [{"state": "FINISHED"}]}))
    return state, local


def _metric_reads(state: FakeFlink) -> int:
    state.settle()
    return sum(n for (m, p), n in state.calls.items() if m == "GET" and p.startswith("/jobmanager/metrics"))


def test_a_reading_far_above_the_line_is_trusted_without_waiting_for_a_fresh_one(stack_on: Any) -> None:
    state, local = stack_on
    state.on("GET", "/jobmanager/metrics*", _metrics(200))  # 824 MB free, the line at 250
    assert local.recycle_if_worn("replay") is False
    assert _metric_reads(state) == 1 and local.recycled == []


def test_near_the_line_the_fresh_reading_decides(stack_on: Any) -> None:
    state, local = stack_on
    state.on("GET", "/jobmanager/metrics*", _metrics(600), _metrics(800))  # cached 424 MB free, fresh 224
    assert local.recycle_if_worn("replay") is True
    assert _metric_reads(state) == 2 and local.recycled == ["replay"]


def test_a_busy_cluster_is_recycled_only_when_asked_to(stack_on: Any) -> None:
    state, local = stack_on
    state.on("GET", "/jobs/overview", (200, {"jobs": [{"state": "RUNNING"}]}))
    state.on("GET", "/jobmanager/metrics*", _metrics(900))
    assert local.recycle_if_worn("production") is False and local.recycled == []
    assert local.recycle_if_worn("production", when_busy=True) is True and local.recycled == ["production"]

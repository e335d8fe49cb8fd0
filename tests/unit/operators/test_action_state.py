"""IsolateActionStateOperator records the topics in a signed manifest with the key: the signature covers the
isolation section (issue 42 §11). The Kafka side is a stand-in returning the hook's typed result (its topic
work is the hook's own test); the manifest, its file and the connection are real."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.manifest_io import load_manifest, save_manifest
from airflow_flink_replay.hooks.kafka_topics import ActionStateIsolation
from airflow_flink_replay.operators.action_state import IsolateActionStateOperator
from tests.unit.core.test_manifest import _data

KEY = "isolate-side-hmac-key-5"


class _Topics:
    def isolate_action_state(self, production_topic: str, topics: dict[str, str], **_: Any) -> ActionStateIsolation:
        return ActionStateIsolation(
            production_topic=production_topic,
            partitions=1,
            topics=dict(topics),
            created=list(topics.values()),
            production_end_offsets_before={0: 0},
            recorded_at=datetime.now(UTC),
        )


def _isolate(manifest: Path, **kwargs: Any) -> IsolateActionStateOperator:
    op = IsolateActionStateOperator(
        task_id="isolate_action_state",
        production_topic="prod-as",
        variants=["baseline"],
        run_key="t1",
        manifest_uri=f"file://{manifest}",
        **kwargs,
    )
    op.__dict__["hook"] = _Topics()
    return op


def test_the_topics_are_recorded_and_signed_with_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AFR_SIGNING", json.dumps({"conn_type": "generic", "password": KEY}))
    manifest = tmp_path / "manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), manifest, signing_key=KEY)
    result = _isolate(manifest, signing_conn_id="afr_signing").execute({"run_id": "t1"})
    recorded = load_manifest(manifest, signing_key=KEY)
    assert recorded.isolation.action_state_topics == result["topics"] and recorded.signature_covers_isolation
    assert KEY not in json.dumps(result)


def test_a_signed_manifest_is_not_rewritten_without_the_key(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), manifest, signing_key=KEY)
    with pytest.raises(AirflowException, match="signing_conn_id"):
        _isolate(manifest).execute({"run_id": "t1"})
    load_manifest(manifest, signing_key=KEY)  # untouched: still verifies

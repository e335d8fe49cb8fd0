"""ReplayManifest: canonical digest, every validation error and its message, isolation, reuse, the production side
built from the quiesce result. ``_data()`` is a valid manifest document other tests start from."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.manifest import (
    ManifestError,
    ManifestTamperedError,
    ReplayManifest,
)
from airflow_flink_replay.core.manifest_io import load_manifest, save_manifest

AGENT = "4aab10bf863e9ada48b1abaa99285148"
JOB = "44036137620ed3b3371375cf3538855a"


def _data() -> dict[str, Any]:
    return {
        "run_id": "manual__2026-11-29T09:00:00",
        "created_at": "2026-11-29T09:00:00+00:00",
        "production": {
            "job_id": JOB,
            "job_name": "support-agent",
            "flink_version": "2.2.1",
            "savepoint": {
                "path": "file:///tmp/savepoints/savepoint-440361-abc",
                "format": "CANONICAL",
                "quiesce_mode": "drain",
                "triggered_at": "2026-11-29T08:59:58+00:00",
                "completed_at": "2026-11-29T08:59:59+00:00",
                "checkpoint_id": 7,
            },
            "agent": {"vertex_id": AGENT, "parallelism": 1, "max_parallelism": 128},
            "plan_vertex_ids": ["13ac5fc714a257b6cff827eb3ec52113", AGENT],
        },
        "capture": {
            "kafka_conn_id": "kafka_default",
            "bootstrap_servers": "127.0.0.1:9092",
            "topic": "support-requests-capture",
            "partitions": [
                {
                    "partition": 1,
                    "start_offset": 5,
                    "end_offset": 9,
                    "record_count": 4,
                    "first_timestamp_ms": 1795942352000,
                    "last_timestamp_ms": 1795942353000,
                },
                {
                    "partition": 0,
                    "start_offset": 3,
                    "end_offset": 6,
                    "record_count": 3,
                    "first_timestamp_ms": 1795942352100,
                    "last_timestamp_ms": 1795942353100,
                },
            ],
            "key_serializer": "string",
            "value_serializer": {"format": "json", "json_schema": {"type": "object"}},
            "event_time": {"source": "field", "field": "$.ts"},
            "watermark": {"max_out_of_orderness_ms": 2000, "idleness_ms": 30000},
        },
    }


def _shuffled(obj: Any, rng: random.Random) -> Any:
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffled(v, rng) for v in obj]
    return obj


def test_digest_is_stable_across_key_order() -> None:
    base = ReplayManifest.parse(_data(), verify=False).sealed()
    for seed in range(5):
        shuffled = _shuffled(json.loads(base.to_json()), random.Random(seed))
        again = ReplayManifest.parse(shuffled)  # verifies the stored digest
        assert again.compute_digest() == base.digest
    # partition order in the input does not matter either
    data = _data()
    data["capture"]["partitions"].reverse()
    assert ReplayManifest.parse(data, verify=False).compute_digest() == base.digest


def test_digest_changes_with_content() -> None:
    a = ReplayManifest.parse(_data(), verify=False)
    data = _data()
    data["capture"]["partitions"][0]["end_offset"] = 10
    b = ReplayManifest.parse(data, verify=False)
    assert a.compute_digest() != b.compute_digest()


def test_unsealed_manifest_is_refused_when_verifying() -> None:
    with pytest.raises(ManifestTamperedError, match="digest: missing"):
        ReplayManifest.parse(_data())


def _error_for(mutate) -> ManifestError:
    data = copy.deepcopy(_data())
    mutate(data)
    with pytest.raises(ManifestError) as info:
        ReplayManifest.parse(data, verify=False)
    return info.value


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (
            lambda d: d["capture"]["partitions"][0].update(start_offset=12),
            "capture.partitions.0",
            "partition 1: start_offset 12 is after end_offset 9. Fix: the window must end at or after its start",
        ),
        (
            lambda d: d["capture"]["partitions"].append(dict(d["capture"]["partitions"][0])),
            "capture.partitions",
            "duplicate partition 1. Fix: list each partition of the capture topic once",
        ),
        (
            lambda d: d["capture"].update(value_serializer="protobuf"),
            "capture.value_serializer.format",
            "unknown serializer 'protobuf'. Fix: use one of string, json, bytes, avro",
        ),
        (
            lambda d: d["capture"].update(key_serializer={"format": "avro"}),
            "capture.key_serializer",
            "serializer 'avro' without avro_schema. Fix: add the Avro writer schema",
        ),
        (
            lambda d: d["production"].pop("savepoint"),
            "production.savepoint",
            "missing. Fix: a manifest must link to the savepoint the replay restores from",
        ),
        (
            lambda d: d["production"]["savepoint"].update(path="  "),
            "production.savepoint.path",
            "missing savepoint: the path is empty. Fix:",
        ),
        (
            lambda d: d["capture"]["partitions"][1].update(record_count=4),
            "capture.partitions.1",
            "partition 0: record_count 4 exceeds the offset range [3, 6) of 3",
        ),
        (
            lambda d: d["capture"].update(event_time={"source": "field"}),
            "capture.event_time",
            "event time source 'field' without a field. Fix: give a JSONPath",
        ),
        (
            lambda d: d["capture"].update(event_time={"source": "field", "field": "ts"}),
            "capture.event_time",
            "'ts' is not a JSONPath",
        ),
        (
            lambda d: d["capture"].update(bootstrap_servers="SASL_SSL://user:secret@broker:9093"),
            "capture.bootstrap_servers",
            "credentials belong in the Airflow connection",
        ),
        (
            lambda d: d["production"]["agent"].update(vertex_id="action-execute-operator"),
            "production.agent.vertex_id",
            "is not a Flink operator id",
        ),
        (
            lambda d: d["production"]["agent"].update(vertex_id="0" * 32),
            "production",
            "agent vertex 00000000000000000000000000000000 is not among production's plan_vertex_ids",
        ),
        (
            lambda d: d.update(schema_version=2),
            "schema_version",
            "schema_version 2 is not supported (this code reads 1)",
        ),
        (
            lambda d: d["capture"].update(topik="x"),
            "capture.topik",
            "unknown field. Fix: remove it or check its spelling",
        ),
        (
            lambda d: d.update(
                isolation={"production_action_state_topic": "as", "action_state_topics": {"candidate": "as"}}
            ),
            "isolation",
            "variant 'candidate' would use production's action-state topic 'as'",
        ),
    ],
    ids=[
        "start-after-end",
        "duplicate-partition",
        "unknown-serializer",
        "avro-without-schema",
        "missing-savepoint",
        "empty-savepoint-path",
        "count-exceeds-range",
        "event-field-missing",
        "event-field-not-jsonpath",
        "secret-in-bootstrap",
        "bad-vertex-id",
        "agent-not-in-plan",
        "schema-version",
        "unknown-field",
        "production-action-state-topic",
    ],
)
def test_validation_errors_name_the_field_and_the_fix(mutate, field: str, message: str) -> None:
    err = _error_for(mutate)
    assert any(p.startswith(f"{field}: ") and message in p for p in err.problems), err.problems


def test_with_isolation_reseals_and_refuses_production_topic() -> None:
    m = ReplayManifest.parse(_data(), verify=False).sealed()
    m2 = m.with_isolation(
        production_action_state_topic="prod-as", action_state_topics={"baseline": "rp-b", "candidate": "rp-c"}
    )
    m2.verify()
    assert m2.digest != m.digest
    with pytest.raises(ManifestError, match="would use production's action-state topic"):
        m2.with_isolation(action_state_topics={"candidate": "prod-as"})


def test_summary_mentions_the_essentials() -> None:
    text = ReplayManifest.parse(_data(), verify=False).sealed().summary()
    assert "file:///tmp/savepoints/savepoint-440361-abc" in text
    assert "7 records in 2 partition(s)" in text
    assert "p0   offsets [3, 6)  3 records" in text
    assert "quiesce=drain" in text


def _quiesce() -> dict[str, Any]:
    """The shape of the control plane's QuiesceResult XCom (core/flink_models.py)."""
    return {
        "job_id": JOB,
        "job_name": "support-agent",
        "mode": "drain",
        "savepoint_path": "file:///sp/savepoint-1",
        "format_type": "CANONICAL",
        "trigger_id": "t",
        "requested_at": "2026-11-29T09:00:00+00:00",
        "savepoint_completed_at": "2026-11-29T09:00:01+00:00",
        "production_stopped": True,
        "in_flight_work_possible": False,
        "plan": {
            "job_id": JOB,
            "job_name": "support-agent",
            "max_parallelism": None,
            "agent_vertex_id": AGENT,
            "vertices": [
                {"id": AGENT, "name": "action-execute-operator -> out", "parallelism": 1, "max_parallelism": 128},
                {
                    "id": "13ac5fc714a257b6cff827eb3ec52113",
                    "name": "Source: in",
                    "parallelism": 1,
                    "max_parallelism": 128,
                },
            ],
        },
    }


def test_production_from_quiesce_result() -> None:
    from airflow_flink_replay.core.manifest import production_from_quiesce_result

    side = production_from_quiesce_result(_quiesce(), flink_version="2.2.1", agent_uid="afr-agent", checkpoint_id=3)
    assert side.savepoint.path == "file:///sp/savepoint-1" and side.savepoint.quiesce_mode == "drain"
    assert side.savepoint.checkpoint_id == 3 and side.savepoint.completed_at is not None
    assert (side.agent.vertex_id, side.agent.uid, side.agent.max_parallelism) == (AGENT, "afr-agent", 128)
    assert set(side.plan_vertex_ids) == {AGENT, "13ac5fc714a257b6cff827eb3ec52113"}

    q = _quiesce()
    q["savepoint_path"] = ""
    q["plan"]["agent_vertex_id"] = None
    with pytest.raises(ManifestError) as info:
        production_from_quiesce_result(q)
    assert info.value.problems[0].startswith("production.savepoint: missing. Fix:")
    assert "production.agent: the quiesce result's plan has no agent vertex" in info.value.problems[1]

    q = _quiesce()
    q["plan"]["vertices"][0]["max_parallelism"] = None
    with pytest.raises(ManifestError, match=r"production.agent.max_parallelism: unknown"):
        production_from_quiesce_result(q)


def test_production_plan_is_recorded_for_a_later_identity_preflight() -> None:
    from airflow_flink_replay.core.identity import IdentityPlan
    from airflow_flink_replay.core.manifest import production_from_quiesce_result
    from airflow_flink_replay.operators.replay import _as_rest_details

    side = production_from_quiesce_result(_quiesce())
    plan = side.production_plan()
    assert plan is not None and plan["agent_vertex_id"] == AGENT
    assert [v["name"] for v in plan["vertices"]] == ["action-execute-operator -> out", "Source: in"]
    found = IdentityPlan.from_rest(_as_rest_details(plan)).find_agent()
    assert found is not None and found[0].id == AGENT and found[0].max_parallelism == 128
    # a manifest sealed before plans were recorded still pins the agent: its vertex id and max parallelism
    old = ReplayManifest.parse(_data(), verify=False).production.production_plan()
    found = IdentityPlan.from_rest(_as_rest_details(old)).find_agent()
    assert found is not None and (found[0].id, found[0].max_parallelism) == (AGENT, 128)
    assert [v["id"] for v in old["vertices"]] == [AGENT]


def test_for_reuse_keeps_savepoint_and_window_and_names_its_origin(tmp_path: Path) -> None:
    earlier = save_manifest(ReplayManifest.parse(_data(), verify=False), tmp_path / "m.json")
    earlier = earlier.with_isolation(action_state_topics={"baseline": "old-topic"})
    reused = earlier.for_reuse("manual__later").sealed()
    assert reused.run_id == "manual__later" and reused.reused_from == f"{earlier.run_id} {earlier.digest}"
    assert reused.production.savepoint.quiesce_mode == "existing"
    assert reused.production.savepoint.path == earlier.production.savepoint.path
    assert reused.capture == earlier.capture and reused.isolation.action_state_topics == {}
    reused.verify()
    tampered = earlier.model_copy(update={"run_id": "edited"})
    with pytest.raises(ManifestTamperedError):
        tampered.for_reuse("x")


def test_manifests_sealed_before_the_newer_fields_still_verify() -> None:
    """A manifest sealed by the code before ``racing_records``/``plan_vertices``/``reused_from`` existed
    (data/manifest_before_racing_records.json, written by commit a747a36) still verifies."""
    golden = Path(__file__).parents[1] / "data" / "manifest_before_racing_records.json"
    manifest = load_manifest(golden)
    assert manifest.production.plan_vertices == [] and manifest.reused_from is None
    data = json.loads(golden.read_text())
    data["production"]["savepoint"]["racing_records"] = 0  # a value that is set is covered by the digest
    with pytest.raises(ManifestTamperedError):
        ReplayManifest.parse(data)
    assert manifest.capture.production_outputs is None  # the newest field: absent from the golden as well
    data = json.loads(golden.read_text())
    data["capture"]["production_outputs"] = {"topic": "outputs", "start_offsets": {"0": 7}}
    with pytest.raises(ManifestTamperedError):  # ... and covered by the digest once set
        ReplayManifest.parse(data)
    assert manifest.capture.cassette is None  # the cassette link likewise
    data = json.loads(golden.read_text())
    data["capture"]["cassette"] = {"topic": "cassette", "start_offsets": {"0": 7}}
    with pytest.raises(ManifestTamperedError):
        ReplayManifest.parse(data)


def test_start_offsets_carry_productions_output_and_cassette_offsets_into_the_manifest() -> None:
    from airflow_flink_replay.core.manifest import CassetteLink, ProductionOutputs
    from airflow_flink_replay.operators.manifest import _linked_topic

    xcom = {"topic": "cap", "offsets": {"0": 3}, "output_topic": "outputs", "output_offsets": {"0": 11, "1": 4},
            "cassette_topic": "tape", "cassette_offsets": {"0": 7}}
    outputs = _linked_topic(xcom, "output", ProductionOutputs)
    assert outputs is not None and (outputs.topic, outputs.start_offsets) == ("outputs", {0: 11, 1: 4})
    cassette = _linked_topic(xcom, "cassette", CassetteLink)
    assert cassette == CassetteLink(topic="tape", start_offsets={0: 7})
    bare = {"topic": "cap", "offsets": {"0": 3}}
    assert _linked_topic(bare, "output", ProductionOutputs) is None  # no output_topic: no figure
    assert _linked_topic(bare, "cassette", CassetteLink) is None


@pytest.mark.parametrize("field", ["job_id", "digest"])
def test_an_id_or_digest_with_a_trailing_newline_is_refused(field: str) -> None:
    """``$`` in a regex accepts a trailing newline: ids and digests are matched to their very end."""
    data = copy.deepcopy(_data())
    if field == "job_id":
        data["production"]["job_id"] = JOB + "\n"
    else:
        data["digest"] = "sha256:" + "0" * 64 + "\n"
    with pytest.raises(ManifestError, match="is not"):
        ReplayManifest.parse(data, verify=False)

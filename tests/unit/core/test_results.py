"""Result topics: output ids, reading back with copies dropped, the audit target, the spec's refusals."""

from __future__ import annotations

import json

import pytest

from airflow_flink_replay.core.audit import AuditRecord
from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.results import AuditTopic, ResultReader, ResultTopics, output_digest, with_output_id

pytestmark = pytest.mark.unit


def _out(label: str, watermark: int = 0) -> str:
    return json.dumps({"id": "r1", "label": label, "_replay": {"variant": "baseline", "watermark_ms": watermark}})


def test_output_digest_ignores_the_replay_bookkeeping_but_not_the_content() -> None:
    a, b = json.loads(_out("pos", 1)), json.loads(_out("pos", 99))
    assert output_digest(a) == output_digest(b)  # a re-send after a restart may see another watermark
    assert output_digest(a) != output_digest(json.loads(_out("neg", 1)))


def test_with_output_id_keeps_the_output_and_adds_the_id() -> None:
    text = with_output_id(_out("pos", 5), "abc", 3)
    obj = json.loads(text)
    assert obj["_replay"] == {"variant": "baseline", "watermark_ms": 5, "output_id": "abc:3"}
    assert obj["label"] == "pos"


def _numbered(labels: list[str]) -> list[str]:
    """What the keyed numbering operator emits for ``labels`` in order."""
    counts: dict[str, int] = {}
    out = []
    for label in labels:
        text = _out(label)
        digest = output_digest(json.loads(text))
        counts[digest] = counts.get(digest, 0) + 1
        out.append(with_output_id(text, digest, counts[digest]))
    return out


def test_reader_drops_what_a_restart_sent_again_and_keeps_equal_outputs() -> None:
    sent = _numbered(["pos", "pos", "neg", "pos"])
    # a restart from a checkpoint taken after the first two: the last two are sent again, same ids
    topic = [*sent, *sent[2:]]
    reader = ResultReader(kind="outputs")
    kept = [t for t in topic if reader.keep(t.encode())]
    reader.finish()
    assert kept == sent  # three "pos" outputs stay three: identical content is numbered, not merged
    assert (reader.read, reader.kept, reader.duplicates, reader.gaps) == (6, 4, 2, [])


def test_reader_reports_a_gap_in_the_numbers() -> None:
    sent = _numbered(["pos", "pos", "pos"])
    reader = ResultReader(kind="outputs")
    for text in (sent[0], sent[2]):
        reader.keep(text)
    digest = json.loads(sent[0])["_replay"]["output_id"].split(":")[0]
    assert reader.finish().gaps == [f"{digest}:2"]


def test_reader_dedups_audit_records_by_their_id_and_keeps_lines_without_one() -> None:
    record = AuditRecord.for_call(
        variant="baseline", key="k", resource_type="tool", resource_name="t", method="call", args=(1,), kwargs={},
        decision="record", outcome="recorded",
    )
    other = record.model_copy(update={"id": "other"})
    reader = ResultReader(kind="audit")
    kept = [r for r in (record.model_dump_json(), record.model_dump_json(), other.model_dump_json(), "not json")
            if reader.keep(r)]
    assert len(kept) == 3 and (reader.duplicates, reader.without_id) == (1, 1)


def test_audit_records_have_distinct_ids() -> None:
    make = lambda: AuditRecord.for_call(  # noqa: E731
        variant="v", key="k", resource_type="tool", resource_name="t", method="m", args=(), kwargs={},
        decision="allow", outcome="ok",
    )
    assert make().id != make().id


def _spec(**update: object) -> ReplayJobSpec:
    base = {
        "variant": "baseline", "agent_job": "pkg.jobs:job", "job_identifier": "replay-x-baseline",
        "action_state_topic": "as-replay-x-baseline", "production_action_state_topic": "as",
        "output_dir": "/runs/x/baseline/output-parts", "audit_dir": "/runs/x/baseline/audit-parts",
        "kafka_bootstrap": "broker:9092", "capture_topic": "cap", "start_offsets": {0: 0}, "end_offsets": {0: 5},
    }
    return ReplayJobSpec.model_validate({**base, **update})


def test_audit_target_is_the_audit_topic_with_security_by_reference() -> None:
    security = KafkaClientSecurity(
        security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="${env:KAFKA_PW}"
    )
    spec = _spec(results={"outputs": "o", "audit": "a"}, kafka_security=security.model_dump())
    topic = AuditTopic.parse(spec.audit_target())
    assert topic is not None and topic.topic == "a" and topic.bootstrap == "broker:9092"
    assert "${env:KAFKA_PW}" in topic.security
    assert _spec().audit_target() == "/runs/x/baseline/audit-parts"
    assert AuditTopic.parse("/runs/x/baseline/audit-parts") is None


@pytest.mark.parametrize(
    ("results", "named"),
    [
        ({"outputs": "as", "audit": "a"}, "results.outputs 'as' is production's action-state topic"),
        ({"outputs": "o", "audit": "as-replay-x-baseline"}, "results.audit 'as-replay-x-baseline' is the replay's"),
        ({"outputs": "o", "audit": "o"}, "results.outputs and results.audit are one topic"),
    ],
)
def test_spec_refuses_result_topics_that_are_state_topics(results: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("'", ".").replace("(", r"\(")):
        _spec(results=results)


def test_result_topics_names() -> None:
    topics = ResultTopics(outputs="o", audit="a")
    assert topics.names() == ["o", "a"]

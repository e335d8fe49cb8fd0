"""Reading a replay variant's results back from its topics (``hooks/replay_results.py``): every record from the first
one stored to the end of the log (not to a high watermark), copies a restart sent again dropped, one JSONL line per
record in a local file or an object-storage URI, and nothing half-written when the read fails.

The broker is ``FakeKafka``, the in-memory stand-in of ``tests/fake_kafka.py`` (no broker runs in the unit tests);
the same on the real broker: tests/integration/test_replay_results_topics.py.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from airflow_flink_replay.core.results import ResultTopics, with_output_id
from airflow_flink_replay.exceptions import KafkaTopicError
from airflow_flink_replay.hooks.replay_results import ReplayResultsHook
from airflow_flink_replay.run_io import run_storage
from tests.fake_kafka import FakeKafka, on_fake_kafka

TOPICS = ResultTopics(outputs="rp-baseline-outputs", audit="rp-baseline-audit")


def output(i: int, n: int = 1, digest: str = "d") -> bytes:
    return with_output_id(json.dumps({"id": f"r-{i}", "label": "ok"}), f"{digest}{i}", n).encode()


def audit(call_id: str) -> bytes:
    return json.dumps({"id": call_id, "resource_name": "notify_support"}).encode()


@pytest.fixture
def kafka() -> FakeKafka:
    broker = FakeKafka()
    broker.create(TOPICS.outputs, 2)
    broker.create(TOPICS.audit, 1)
    return broker


def hook(kafka: FakeKafka) -> ReplayResultsHook:
    return on_fake_kafka(ReplayResultsHook, kafka, kafka_config_id="kafka_unit", timeout=1.0)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_outputs_are_collected_one_a_line_with_the_copies_a_restart_sent_again_dropped(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    for i in range(4):
        kafka.add(TOPICS.outputs, i % 2, 100 + i, output(i) + b"\n")
    kafka.add(TOPICS.outputs, 0, 200, output(0))  # sent again after a restart: the same id
    kafka.add(TOPICS.outputs, 1, 201, None)  # a tombstone carries no output
    target = tmp_path / "runs" / "baseline" / "outputs.jsonl"
    reader = hook(kafka).collect(TOPICS.outputs, "outputs", str(target))
    assert sorted(o["id"] for o in lines(target)) == ["r-0", "r-1", "r-2", "r-3"]
    assert not target.read_text().endswith("\n\n") and "\n\n" not in target.read_text()
    assert (reader.kind, reader.read, reader.kept, reader.duplicates, reader.without_id) == ("outputs", 5, 4, 1, 0)
    assert reader.gaps == [] and kafka.assigned == {}


def test_a_gap_in_the_numbering_of_one_content_is_reported(kafka: FakeKafka, tmp_path: Path) -> None:
    for n in (1, 3):  # output d7:2 never arrived
        kafka.add(TOPICS.outputs, 0, 100 + n, output(7, n))
    reader = hook(kafka).collect(TOPICS.outputs, "outputs", str(tmp_path / "o.jsonl"))
    assert reader.gaps == ["d7:2"] and reader.kept == 2


def test_reading_runs_from_the_first_stored_record_to_the_end_of_the_log(kafka: FakeKafka, tmp_path: Path) -> None:
    """Retention deleted offset 0; the broker reports a high watermark below what it holds (tansu after
    multi-record batches): everything stored is read all the same."""
    for i in range(6):
        kafka.add(TOPICS.outputs, 0, 100 + i, output(i))
    kafka.trim(TOPICS.outputs, 0, 1)
    kafka.reported_high[TOPICS.outputs, 0] = 2
    target = tmp_path / "o.jsonl"
    hook(kafka).collect(TOPICS.outputs, "outputs", str(target))
    assert [o["id"] for o in lines(target)] == ["r-1", "r-2", "r-3", "r-4", "r-5"]


def test_an_empty_topic_gives_an_empty_file(kafka: FakeKafka, tmp_path: Path) -> None:
    target = tmp_path / "o.jsonl"
    reader = hook(kafka).collect(TOPICS.outputs, "outputs", str(target))
    assert target.read_text() == "" and reader.read == 0


def test_audit_records_are_told_apart_by_their_own_id_and_lines_that_are_not_json_are_kept(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    for value in (audit("a-1"), audit("a-2"), audit("a-1"), b"not json", b'{"no": "id"}'):
        kafka.add(TOPICS.audit, 0, 1, value)
    target = tmp_path / "audit.jsonl"
    reader = hook(kafka).collect(TOPICS.audit, "audit", str(target))
    assert target.read_text().splitlines() == [audit("a-1").decode(), audit("a-2").decode(), "not json", '{"no": "id"}']
    assert (reader.kept, reader.duplicates, reader.without_id) == (4, 1, 2)


def test_both_topics_of_a_variant_are_collected_into_their_files(kafka: FakeKafka, tmp_path: Path) -> None:
    kafka.add(TOPICS.outputs, 1, 5, output(1))
    kafka.add(TOPICS.audit, 0, 5, audit("a-9"))
    found = hook(kafka).collect_results(TOPICS, str(tmp_path / "o.jsonl"), str(tmp_path / "a.jsonl"))
    assert (found["outputs"].kind, found["outputs"].kept, found["audit"].kind, found["audit"].kept) == (
        "outputs",
        1,
        "audit",
        1,
    )
    assert lines(tmp_path / "a.jsonl") == [{"id": "a-9", "resource_name": "notify_support"}]


def test_results_can_go_to_an_object_storage_uri(kafka: FakeKafka) -> None:
    kafka.add(TOPICS.outputs, 0, 5, output(3))
    target = f"memory://afr-unit-{uuid.uuid4().hex[:8]}/runs/baseline/outputs.jsonl"
    hook(kafka).collect(TOPICS.outputs, "outputs", target)
    with run_storage.open_text(target) as fh:
        assert [json.loads(line)["id"] for line in fh] == ["r-3"]


def test_a_read_that_fails_leaves_the_earlier_file_as_it_was(kafka: FakeKafka, tmp_path: Path) -> None:
    target = tmp_path / "o.jsonl"
    target.write_text('{"earlier": true}\n')
    for i in range(3):
        kafka.add(TOPICS.outputs, 0, 100 + i, output(i))
    kafka.fail[TOPICS.outputs, 1] = KafkaError(KafkaError._TRANSPORT)
    with pytest.raises(KafkaTopicError, match=r"reading rp-baseline-outputs\[1\] failed"):
        hook(kafka).collect(TOPICS.outputs, "outputs", str(target))
    assert target.read_text() == '{"earlier": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]


def test_a_topic_that_does_not_end_in_time_is_a_timeout(kafka: FakeKafka, tmp_path: Path) -> None:
    kafka.add(TOPICS.outputs, 0, 1, output(0))
    kafka.stalled = True
    with pytest.raises(TimeoutError, match=r"reading rp-baseline-outputs \[0, 1\] did not reach the end offsets"):
        hook(kafka).collect(TOPICS.outputs, "outputs", str(tmp_path / "o.jsonl"), timeout=0.05)

"""production_job.py's arguments: one agent (a job definition or the older factory), and production's event
time and watermarks from the arguments where given, else from the job definition."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.manifest import EventTime
from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey
from airflow_flink_replay.flink.production_job import parse_args, production_timing

REQUIRED = ["--bootstrap", "k:9092", "--source-topic", "s", "--sink-topic", "o", "--action-state-topic", "a"]


def test_one_agent_is_required() -> None:
    assert parse_args(["--agent-job", "pkg.jobs:job", *REQUIRED]).agent_job == "pkg.jobs:job"
    assert parse_args(["--agent-factory", "pkg.agent:build", *REQUIRED]).agent_factory == "pkg.agent:build"
    with pytest.raises(SystemExit):
        parse_args(REQUIRED)
    with pytest.raises(SystemExit):
        parse_args(["--agent-job", "a:b", "--agent-factory", "c:d", *REQUIRED])


def test_timing_comes_from_the_arguments_else_from_the_definition() -> None:
    job = AgentJob(
        agent=object(),
        key_selector=FieldKey("id"),
        event_time=EventTime(source="field", field="$.ts", unit="s"),
        watermark="bounded:5000",
        idleness_ms=30_000,
    )
    from_job = production_timing(parse_args(["--agent-job", "a:b", *REQUIRED]), job)
    assert (from_job.event_time.field, from_job.event_time.unit) == ("$.ts", "s")
    assert (from_job.watermark, from_job.idleness_ms) == ("bounded:5000", 30_000)
    args = parse_args(["--agent-job", "a:b", "--event-time-field", "", "--watermark", "none", "--idleness-ms", "0",
                       *REQUIRED])  # fmt: skip
    overridden = production_timing(args, job)
    assert overridden.event_time == EventTime(), "an empty --event-time-field: the Kafka record timestamp"
    assert (overridden.watermark, overridden.idleness_ms) == ("none", None)
    default = production_timing(parse_args(["--agent-factory", "a:b", *REQUIRED]))
    assert (default.event_time, default.watermark, default.idleness_ms) == (EventTime(), "monotonous", None)


def test_the_memory_journal_is_named_in_the_memory_bindings_config_with_productions_broker() -> None:
    from airflow_flink_replay.flink.production_job import production_mem0_config
    from airflow_flink_replay.memory.journal import JOURNAL_KEY, split_journal

    store = '{"vector_store": {"provider": "chroma"}}'
    plain = parse_args(["--agent-job", "a:b", *REQUIRED, "--mem0-config", store])
    assert production_mem0_config(plain) == {"vector_store": {"provider": "chroma"}}
    security = '{"protocol": "SASL_SSL", "password": "${env:KAFKA_PASSWORD}"}'
    journaled = parse_args(["--agent-job", "a:b", *REQUIRED, "--mem0-config", store, "--memory-journal-topic", "mj",
                            "--kafka-security", security])
    config = production_mem0_config(journaled)
    assert config is not None and JOURNAL_KEY in config
    rest, journal = split_journal(config)
    assert rest == {"vector_store": {"provider": "chroma"}}
    assert journal is not None and (journal.topic, journal.bootstrap, journal.security) == ("mj", "k:9092", security)

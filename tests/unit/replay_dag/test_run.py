"""The resolved run's replay job specs carry production's topic and identifier (so the guards run where the
job is built) and, with manifest signing configured, a reference to the key — never the key itself; the
spec fields behind them (``manifest_sources``, ``manifest_signing_conn_id``, ``manifest_key_ref``). Each variant
gets its own fork, topic and files, the extra A/A baselines of ``aa_replays`` too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_spec import DEFAULT_MANIFEST_KEY_REF, ReplaySpec, variant_names
from airflow_flink_replay.core.results import AuditTopic
from airflow_flink_replay.ids import job_spec_key
from airflow_flink_replay.replay_dag.run import resolve_run
from tests.unit.core.test_replay_spec import _spec

KEY = "never-in-a-spec-4711"
VARIANTS = variant_names()  # a default spec's: baseline, baseline_2, candidate


def test_every_job_spec_names_productions_topic_and_identifier(tmp_path: Path) -> None:
    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    run = resolve_run(spec, {}, "gate", "t1")
    for variant in VARIANTS:
        job = ReplayJobSpec.model_validate(run[f"job_spec_{variant}"])
        assert job.production_action_state_topic == "reviews-action-state"
        assert job.production_job_identifier == "review-triage-prod"
        assert job.production_clashes() == [] and job.manifest_key_ref is None


def test_with_signing_the_job_spec_carries_a_reference_and_never_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AFR_MANIFEST_SIGNING", json.dumps({"conn_type": "generic", "password": KEY}))
    spec = ReplaySpec.model_validate(
        _spec(runs_uri=f"file://{tmp_path}", manifest_signing_conn_id="afr_manifest_signing")
    )
    assert spec.manifest_key_ref == DEFAULT_MANIFEST_KEY_REF
    run = resolve_run(spec, {}, "gate", "t1")
    assert KEY not in json.dumps(run, default=str)
    for variant in VARIANTS:
        job = ReplayJobSpec.model_validate(run[f"job_spec_{variant}"])
        argv = job.to_argv()
        assert job.manifest_key_ref == "${env:AFR_MANIFEST_KEY}" and KEY not in " ".join(argv)
    custom = ReplaySpec.model_validate(
        _spec(runs_uri=f"file://{tmp_path}", manifest_signing_conn_id="s", manifest_key_ref="${file:/etc/afr/key}")
    )
    assert resolve_run(custom, {}, "gate", "t1")["job_spec_baseline"]["manifest_key_ref"] == "${file:/etc/afr/key}"


def test_the_spec_refuses_a_literal_key_and_a_reference_without_signing() -> None:
    with pytest.raises(ValidationError) as err:
        ReplaySpec.model_validate(_spec(manifest_signing_conn_id="s", manifest_key_ref=KEY))
    assert "must be a reference" in str(err.value) and KEY not in str(err.value)
    with pytest.raises(ValidationError, match="without manifest_signing_conn_id"):
        ReplaySpec.model_validate(_spec(manifest_key_ref="${env:K}"))
    with pytest.raises(ValidationError, match="manifest_sources is empty"):
        ReplaySpec.model_validate(_spec(manifest_sources=[]))


def test_manifest_sources_default_to_the_runs_location() -> None:
    spec = ReplaySpec.model_validate(_spec())
    assert spec.allowed_manifest_sources() == ["file:///tmp/replay-runs"]
    listed = ReplaySpec.model_validate(_spec(manifest_sources=["s3://bucket/replays", "file:///archive"]))
    assert listed.allowed_manifest_sources() == ["s3://bucket/replays", "file:///archive"]
    # run overrides keep them (they are not per-run choices)
    assert listed.with_run_overrides({"keep_fork": True}).allowed_manifest_sources() == listed.manifest_sources


def test_resolve_run_gives_each_variant_its_own_fork_topic_and_files(tmp_path: Path) -> None:
    from airflow_flink_replay.dag_factory import resolve_run

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    run = resolve_run(spec, {"candidate": ""}, "gate", "tag1")
    assert run["run_dir"] == str(tmp_path / "gate" / "tag1")
    assert run["manifest_uri"] == f"file://{tmp_path}/gate/tag1/manifest.json"
    assert len({run[f"fork_{v}"] for v in ("baseline", "baseline_2", "candidate")}) == 3
    assert run["job_spec_candidate"]["agent_factory"] == "examples.review_agent.v2.agent:build_agent"
    assert run["job_spec_baseline_2"]["agent_factory"] == "examples.review_agent.v1.agent:build_agent"
    assert run["job_spec_baseline"]["action_state_topic"] == run["topics"]["baseline"]
    assert run["job_spec_baseline"]["manifest"] == str(tmp_path / "gate" / "tag1" / "manifest.json")
    for v in ("baseline", "baseline_2", "candidate"):
        assert Path(run[f"output_{v}"]).parent == Path(run[f"job_spec_{v}"]["output_dir"]).parent
    # Without a candidate (nightly), the candidate slot replays production's agent: an A/A/A run.
    nightly = resolve_run(spec.model_copy(update={"candidate_agent_factory": None}), {}, "nightly", "t")
    assert nightly["job_spec_candidate"]["agent_factory"] == spec.production.agent_factory
    assert not [k for k in run if "baseline_3" in k]  # aa_replays=1: no extra baseline


def test_an_extra_a_a_baseline_replays_productions_agent_on_a_fork_and_topics_of_its_own(tmp_path: Path) -> None:
    """aa_replays=2: baseline_3 is resolved like baseline_2 (production's agent), with its own fork namespace,
    action-state and result topics and files, none shared with another variant; its topics are deleted with the
    others."""
    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", aa_replays=2))
    run = resolve_run(spec, {}, "gate", "t1")
    variants = ["baseline", "baseline_2", "baseline_3", "candidate"]
    jobs = {v: ReplayJobSpec.model_validate(run[job_spec_key(v)]) for v in variants}
    extra = jobs["baseline_3"]
    assert extra.variant == "baseline_3" and extra.agent_factory == spec.production.agent_factory
    assert extra.job_identifier == run["fork_baseline_3"] == "replay-review-triage-t1-baseline-3"
    assert extra.action_state_topic == run["topics"]["baseline_3"]
    assert extra.results.model_dump() == run["result_topics"]["baseline_3"]  # type: ignore[union-attr]
    assert extra.production_clashes() == []
    for field in ("job_identifier", "action_state_topic", "output_dir", "audit_dir"):
        assert len({getattr(j, field) for j in jobs.values()}) == 4, field
    results = [t for j in jobs.values() for t in j.results.names()]  # type: ignore[union-attr]
    assert len(set(results)) == 8 and set(run["topic_list"]) == {*results, *run["topics"].values()}
    assert list(run["topics"]) == variants
    assert run["output_baseline_3"].endswith("baseline_3/baseline_3.outputs.jsonl")
    assert run["audit_baseline_3"].endswith("baseline_3/baseline_3.audit.jsonl")


def test_every_job_side_kafka_client_gets_the_security_settings_and_only_references_travel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec's kafka_security reaches the replay jobs' specs, the agent check's program and the capture tee's
    producer — as references; the value appears only where the client is built (inside Flink)."""
    from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
    from airflow_flink_replay.flink.capture import CaptureConfig, CaptureWriter
    from airflow_flink_replay.operators.agent_check import check_program

    security = KafkaClientSecurity(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="r",
                                   sasl_password="${env:AFR_KAFKA_PASSWORD}", ssl_ca_location="/etc/kafka/ca.pem")
    spec = ReplaySpec.model_validate({**_spec(runs_uri=f"file://{tmp_path}"),
                                      "kafka_security": security.model_dump(exclude_none=True)})
    args = check_program(spec, emit="plan").program_args
    assert KafkaClientSecurity.from_arg(args[args.index("--kafka-security") + 1]) == security
    resolved = resolve_run(spec, {}, "gate", "t1")
    job_specs = [ReplayJobSpec.model_validate(resolved[job_spec_key(v)]) for v in VARIANTS]
    assert all(j.kafka_security == security for j in job_specs)

    monkeypatch.setenv("AFR_KAFKA_PASSWORD", "s3cr3t-value")
    assert "s3cr3t-value" not in json.dumps(resolved) + " ".join(args)
    tee = CaptureWriter(CaptureConfig(bootstrap="kafka:9093", topic="t", job="j", security=security.to_arg()))
    conf = tee.producer_config()
    assert (conf["sasl.password"], conf["ssl.ca.location"], conf["security.protocol"]) == (
        "s3cr3t-value", "/etc/kafka/ca.pem", "SASL_SSL")
    # production's cassette recorder and a replay's cassette reader: the same settings, resolved where built
    from airflow_flink_replay.core.cassette import CassetteRecording, CassetteWindow
    from airflow_flink_replay.flink.cassette_io import CassetteRecorder, consumer_config

    recorder = CassetteRecorder(CassetteRecording(bootstrap="kafka:9093", topic="c", security=security.to_arg()))
    window = CassetteWindow(topic="c", start_offsets={0: 0}, end_offsets={0: 3})
    job_window = CassetteWindow.model_validate_json(
        job_specs[0].model_copy(update={"cassette": window}).cassette_json())
    assert "s3cr3t-value" not in job_window.model_dump_json()  # the job spec carries the reference
    for conf in (recorder.producer_config(), consumer_config(job_window)):
        assert (conf["sasl.password"], conf["ssl.ca.location"], conf["sasl.mechanism"]) == (
            "s3cr3t-value", "/etc/kafka/ca.pem", "SCRAM-SHA-512")


def test_resolve_run_on_object_storage_sends_results_over_kafka() -> None:
    """runs_uri may be any ObjectStoragePath URI: every run file keeps its scheme, and each variant's job writes
    its outputs and audit to result topics of its own (deleted with the action-state topics)."""
    from airflow_flink_replay.dag_factory import resolve_run

    spec = ReplaySpec.model_validate(_spec(runs_uri="memory://replays/runs/"))
    run = resolve_run(spec, {}, "gate", "t9")
    assert run["run_dir"] == "memory://replays/runs/gate/t9"
    assert run["manifest_uri"] == "memory://replays/runs/gate/t9/manifest.json"
    assert run["output_baseline"] == "memory://replays/runs/gate/t9/baseline/baseline.outputs.jsonl"
    assert run["audit_candidate"] == "memory://replays/runs/gate/t9/candidate/candidate.audit.jsonl"
    jobs = {v: ReplayJobSpec.model_validate(run[job_spec_key(v)]) for v in VARIANTS}
    topics = [t for job in jobs.values() for t in job.results.names()]  # type: ignore[union-attr]
    assert len(set(topics)) == 6 and not set(topics) & set(run["topics"].values())
    assert all(t.endswith(("-outputs", "-audit")) for t in topics)
    assert set(run["topic_list"]) == {*topics, *run["topics"].values()}
    assert run["result_topics"]["baseline"] == jobs["baseline"].results.model_dump()  # type: ignore[union-attr]
    assert AuditTopic.parse(jobs["candidate"].audit_target()).topic == jobs["candidate"].results.audit  # type: ignore[union-attr]

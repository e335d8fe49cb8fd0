"""Secrets by reference: refused as literals where a config enters, resolved only on the job side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.core.secrets import is_secret_key, literal_secrets, resolve_references
from airflow_flink_replay.exceptions import SecretReferenceError, SpecError

SECRET = "sk-planted-0123456789"


@pytest.mark.parametrize(
    ("key", "secret"),
    [("api_key", True), ("password", True), ("openai_api_key", True), ("bearer_token", True),
     ("sasl.password", True), ("max_tokens", False), ("token_limit", False), ("host", False)],
)  # fmt: skip
def test_secret_looking_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_literal_secrets_are_found_wherever_they_nest_and_references_pass() -> None:
    tree = {
        "vector_store": {"config": {"api_key": SECRET, "host": "qdrant"}},
        "llm": {"config": {"api_key": "${env:OPENAI_API_KEY}", "max_tokens": 100}},
        "hosts": [{"password": "${file:/run/secrets/pw}"}, {"password": SECRET}],
        "empty": {"token": ""},
    }
    assert literal_secrets(tree, "mem0_config") == ["mem0_config.vector_store.config.api_key",
                                                    "mem0_config.hosts[1].password"]  # fmt: skip


def _spec(mem0_config: dict[str, Any], args: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": "demo",
        "production": {
            "job_name": "prod", "agent_factory": "a.b:c", "input_topic": "in", "capture_topic": "cap",
            "action_state_topic": "as", "job_identifier": "prod-id",
            "program": {"module": "jobs.prod", "program_args": args or []},
        },
        "kafka_bootstrap": "k:9092", "runs_uri": "file:///tmp/runs", "mem0_config": mem0_config,
    }  # fmt: skip


def test_a_spec_with_a_literal_secret_is_refused_naming_the_field_never_the_value(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(_spec({"vector_store": {"config": {"api_key": SECRET}}})))
    with pytest.raises(SpecError) as info:
        ReplaySpec.from_yaml(path)
    message = str(info.value)
    assert "mem0_config.vector_store.config.api_key" in message and "${env:NAME}" in message
    assert SECRET not in message
    # in production's own program arguments too (a JSON argument is looked into)
    with pytest.raises(ValidationError) as raw:
        ReplaySpec.model_validate(_spec({}, ["--mem0-config", json.dumps({"llm": {"config": {"api_key": SECRET}}})]))
    assert "production.program.program_args[1].llm.config.api_key" in str(raw.value)
    assert SECRET not in str(raw.value)  # pydantic's input echo is off
    # references are what a spec carries
    ok = ReplaySpec.model_validate(_spec({"vector_store": {"config": {"api_key": "${env:QDRANT_KEY}"}}}))
    assert ok.mem0_config == {"vector_store": {"config": {"api_key": "${env:QDRANT_KEY}"}}}


def test_the_replay_job_spec_refuses_literal_secrets_where_the_job_is_built() -> None:
    base = {"variant": "candidate", "agent_factory": "a.b:c", "job_identifier": "replay-x",
            "action_state_topic": "t", "output_dir": "/o", "audit_dir": "/a", "kafka_bootstrap": "k:9092",
            "capture_topic": "cap", "start_offsets": {0: 0}, "end_offsets": {0: 1}}  # fmt: skip
    with pytest.raises(ValidationError) as info:
        ReplayJobSpec.model_validate({**base, "agent_options": {"service_token": SECRET}})
    assert "agent_options.service_token" in str(info.value) and SECRET not in str(info.value)
    spec = ReplayJobSpec.model_validate({**base, "mem0_config": {"llm": {"config": {"api_key": "${env:K}"}}}})
    assert "${env:K}" in " ".join(spec.to_argv())  # the argument carries the reference only


def test_references_resolve_on_the_job_side_from_env_and_files(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(SECRET + "\n")
    tree = {"a": {"api_key": "${env:AFR_KEY}"}, "b": [f"${{file:{key_file}}}"], "c": "plain"}
    assert resolve_references(tree, {"AFR_KEY": "v1"}) == {"a": {"api_key": "v1"}, "b": [SECRET], "c": "plain"}
    with pytest.raises(SecretReferenceError) as info:
        resolve_references({"llm": {"api_key": "${env:MISSING_KEY}"}}, {}, "mem0_config")
    assert "mem0_config.llm.api_key: ${env:MISSING_KEY} is not set" in str(info.value)
    assert "Fix: export MISSING_KEY" in str(info.value)
    with pytest.raises(SecretReferenceError, match="cannot be read on this Flink host"):
        resolve_references({"k": "${file:/nonexistent/key}"}, {})


def test_the_offline_memory_builder_resolves_references_in_the_process_that_uses_them(tmp_path: Path) -> None:
    from airflow_flink_replay.memory.offline import offline_memory_config

    key_file = tmp_path / "llm-key"
    key_file.write_text(SECRET)
    cfg, _ = offline_memory_config(
        {"llm": {"provider": "openai", "config": {"api_key": f"${{file:{key_file}}}"}}}, mem0_dir=tmp_path
    )
    assert cfg["llm"]["config"]["api_key"] == SECRET

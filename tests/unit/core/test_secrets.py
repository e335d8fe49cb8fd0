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


# ------------------------------------------------------------------------ issue 42: the shapes a secret takes
@pytest.mark.parametrize(
    ("key", "secret"),
    [("accessToken", True), ("secretKey", True), ("apiToken", True), ("passphrase", True), ("pwd", True),
     ("auth", True), ("Authorization", True), ("X-Api-Key", True), ("MYSQL_PWD", True), ("PGPASSWORD", True),
     ("ssl.keystore-password", True), ("clientSecret", True), ("DB_PASS", True),
     ("tokenizer", False), ("private_key_path", False), ("compare_key", False), ("auth_type", False),
     ("author", False), ("maxTokens", False), ("job_name", False)],
)  # fmt: skip
def test_secret_names_in_any_case_style(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_every_shape_of_a_literal_secret_is_found_and_references_pass() -> None:
    tree = {
        "headers": {"Authorization": "Bearer abcdef123456", "X-Trace": "Token-less", "Accept": "application/json"},
        "header_lines": ["Authorization: Basic dXNlcjpwYXNz", "X-Auth: Bearer ${env:TOKEN}"],
        "camel": {"accessToken": SECRET, "secretKey": SECRET, "apiToken": SECRET},
        "short": {"passphrase": SECRET, "pwd": SECRET, "auth": SECRET},
        "numbers": {"password": 12345678, "pin_password": 1.5},
        "nested": {"credentials": {"user": "u", "inner": [SECRET, "${env:OK}"]}, "tokens": ["a"]},
        "urls": {
            "db": "postgresql://user:pw1234@db:5432/app", "user_only": "postgresql://user@db/app",
            "by_ref": "postgresql://user:${env:PW}@db", "conn": "Server=db;Database=x;User Id=u;Password=hunter22;",
            "query": "https://api.example.com/v1?user=a&password=hunter22", "s3_conn": "s3://aws_default@bucket/runs",
            "port": "http://host:8080/path",
        },
        "argv": ["--api-key", SECRET, "--password=hunter22", "--name", "x", "--token", "${env:T}", "--auth-type=basic"],
        "flags": {"use_auth": True, "api_key": None, "token": "", "max_tokens": 100},
        "json_arg": json.dumps({"llm": {"apiKey": SECRET}}),
    }  # fmt: skip
    assert literal_secrets(tree) == [
        "headers.Authorization", "header_lines[0]", "camel.accessToken", "camel.secretKey", "camel.apiToken",
        "short.passphrase", "short.pwd", "short.auth", "numbers.password", "numbers.pin_password",
        "nested.credentials.user", "nested.credentials.inner[0]", "urls.db", "urls.conn", "urls.query",
        "argv[1]", "argv[2]", "json_arg.llm.apiKey",
    ]  # fmt: skip


def _full_spec(**changes: Any) -> dict[str, Any]:
    spec = _spec({})
    program = spec["production"]["program"]
    program.update(changes.pop("program", {}))
    return {**spec, **changes}


def test_a_spec_refuses_secrets_wherever_it_carries_them_naming_each_field() -> None:
    bad = _full_spec(
        program={"program_args": ["--password", SECRET], "env": {"OPENAI_API_KEY": SECRET, "LANG": "C"},
                 "flink_config": {"s3.secret-key": SECRET, "parallelism.default": "2"}},
        policy={"stand_ins": {"notify": {"accessToken": SECRET}, "lookup": f"Authorization: Bearer {SECRET}"},
                "by_name": {"refresh_token": "block"}},
        connector_jars=[f"https://deploy:{SECRET}@repo.example.com/kafka.jar"],
        mem0_config={"llm": {"config": {"api_key": 12345678}}},
    )  # fmt: skip
    with pytest.raises(ValidationError) as info:
        ReplaySpec.model_validate(bad)
    message = str(info.value)
    for field in ("production.program.program_args[1]", "production.program.flink_config.s3.secret-key",
                  "production.program.env.OPENAI_API_KEY", "policy.stand_ins.notify.accessToken",
                  "policy.stand_ins.lookup", "connector_jars[0]", "mem0_config.llm.config.api_key"):  # fmt: skip
        assert field in message, field
    assert "refresh_token" not in message  # a resource name with a decision is no secret
    assert SECRET not in message and "12345678" not in message
    # the same places with references are accepted
    ok = _full_spec(
        program={"program_args": ["--password", "${env:PW}"], "env": {"OPENAI_API_KEY": "${env:OPENAI_API_KEY}"}},
        policy={"stand_ins": {"notify": {"accessToken": "${file:/run/secrets/t}"}}},
    )  # fmt: skip
    assert ReplaySpec.model_validate(ok).production.program.env == {"OPENAI_API_KEY": "${env:OPENAI_API_KEY}"}


def test_the_replay_job_spec_walks_agent_config_too() -> None:
    base = {"variant": "candidate", "agent_factory": "a.b:c", "job_identifier": "replay-x",
            "action_state_topic": "t", "output_dir": "/o", "audit_dir": "/a", "kafka_bootstrap": "k:9092",
            "capture_topic": "cap", "start_offsets": {0: 0}, "end_offsets": {0: 1}}  # fmt: skip
    with pytest.raises(ValidationError) as info:
        ReplayJobSpec.model_validate({**base, "agent_config": {"llm.apiToken": SECRET}})
    assert "agent_config.llm.apiToken" in str(info.value) and SECRET not in str(info.value)


@pytest.mark.parametrize("field", ["runs_uri", "existing_manifest", "savepoint_dir"])
def test_a_location_with_credentials_is_refused_naming_the_field_and_the_fix(field: str) -> None:
    uri = f"s3://AKIAEXAMPLE:{SECRET}@bucket/runs"
    spec = {**_spec({}), field: uri}
    if field == "existing_manifest":
        spec["quiesce_mode"] = "existing"
    with pytest.raises(ValidationError) as info:
        ReplaySpec.model_validate(spec)
    message = str(info.value)
    assert field in message and "connection" in message and "Fix:" in message
    assert SECRET not in message and "AKIAEXAMPLE" not in message
    # a connection id in the URI (Airflow's object storage) is not a credential
    assert ReplaySpec.model_validate({**_spec({}), "runs_uri": "s3://aws_default@bucket/runs"})


def test_an_alias_bomb_or_deep_nesting_is_walked_quickly_without_recursion() -> None:
    """The secret walk visits each distinct container once and stops at a depth bound (a spec given as data,
    not through ``from_yaml``'s own alias bound: a DAG file's dict, a run's conf)."""
    import time

    import yaml

    lines = ["l0: &l0 [{api_key: '${env:K}'}, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 12)]
    bomb = yaml.safe_load("\n".join(lines))  # 9**11 paths, a dozen distinct lists
    started = time.monotonic()
    assert ReplaySpec.model_validate(_spec(bomb)).name == "demo"
    bomb["l0"][0]["api_key"] = SECRET
    with pytest.raises(ValidationError) as info:
        ReplaySpec.model_validate(_spec(bomb))
    assert "mem0_config.l0[0].api_key" in str(info.value) and SECRET not in str(info.value)
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(50_000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(ValidationError, match="nested deeper than"):
        ReplaySpec.model_validate(_spec(deep))
    assert time.monotonic() - started < 10


def test_file_references_must_be_absolute_and_small(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        ReplaySpec.model_validate(_spec({"llm": {"config": {"api_key": "${file:secrets/key}"}}}))
    assert "mem0_config.llm.config.api_key" in str(info.value) and "absolute path" in str(info.value)
    with pytest.raises(SecretReferenceError, match="absolute path"):
        resolve_references({"k": "${file:secrets/key}"}, {})
    big = tmp_path / "big"
    big.write_bytes(b"k" * (64 * 1024 + 1))
    with pytest.raises(SecretReferenceError, match="larger than 64 KiB"):
        resolve_references({"k": f"${{file:{big}}}"}, {})
    for not_a_file in ("/dev/zero", str(tmp_path)):
        with pytest.raises(SecretReferenceError, match="not a regular file"):
            resolve_references({"k": f"${{file:{not_a_file}}}"}, {})
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SecretReferenceError, match="not UTF-8"):
        resolve_references({"k": f"${{file:{binary}}}"}, {})


def test_scrub_replaces_each_resolved_value_in_every_form_it_is_shown_in() -> None:
    from airflow_flink_replay.core.secrets import scrub

    quoted = 'pa"ss\\word-with-quote'  # shown escaped by repr and by JSON
    values = {SECRET: "${env:K}", quoted: "${file:/q}", "8000": "${env:PORT}"}
    shortened = f"{SECRET[:10]}...{SECRET[-9:]}"  # pydantic's long input_value
    text = f"{SECRET} {shortened} {quoted!r} {json.dumps(quoted)} port 8000, offset 18000"
    scrubbed = scrub(text, values)
    assert SECRET[:10] not in scrubbed and SECRET[-9:] not in scrubbed and "ss" not in scrubbed
    assert scrubbed.count("${env:K}") == 3 and scrubbed.count("${file:/q}") == 2
    assert "port ${env:PORT}, offset 18000" in scrubbed  # a short value only where it stands alone


def test_call_scrubbed_leaves_a_harmless_error_alone_and_drops_one_that_shows_a_value() -> None:
    import os
    import traceback

    from airflow_flink_replay.core.secrets import call_scrubbed
    from airflow_flink_replay.exceptions import SecretScrubbedError

    os.environ["AFR_TEST_SCRUB"] = SECRET
    try:
        harmless = KeyError("model")

        def fail(err: Exception) -> None:
            raise err

        with pytest.raises(KeyError) as same:
            call_scrubbed({"k": "${env:AFR_TEST_SCRUB}"}, fail, harmless)
        assert same.value is harmless

        def leak() -> None:
            try:
                raise ValueError(f"bad key {SECRET!r}")
            except ValueError as inner:
                raise RuntimeError("client failed") from inner

        with pytest.raises(SecretScrubbedError) as info:
            call_scrubbed({"k": "${env:AFR_TEST_SCRUB}"}, leak)
        assert "client failed" in str(info.value) and "bad key '${env:AFR_TEST_SCRUB}'" in str(info.value)
        assert info.value.__context__ is None and info.value.__cause__ is None
        assert SECRET not in "".join(traceback.format_exception(info.value)) + repr(info.value)
    finally:
        del os.environ["AFR_TEST_SCRUB"]

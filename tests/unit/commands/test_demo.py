"""``flink-replay demo``: which production and spec each flavour sets up (the run itself is an integration test)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest
import yaml

from airflow_flink_replay.commands import demo
from airflow_flink_replay.local.demo import NOISY_DEMO, V1, V2, DemoSetup, write_spec
from airflow_flink_replay.local.stack import StackInfo


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_parser(parser.add_subparsers())
    return parser.parse_args(["demo", *argv])


def test_the_default_demo_is_deterministic_and_noisy_is_its_own_production() -> None:
    assert demo._setup(_args()) == DemoSetup() and (DemoSetup().v1, DemoSetup().v2) == (V1, V2)
    noisy = demo._setup(_args("--noisy"))
    assert noisy == NOISY_DEMO and noisy.v1.endswith("v1.job:noisy_job") and noisy.v2.endswith("v2.job:noisy_job")
    # its own topics, job and memory namespace: both demos can be deployed on one stack
    assert noisy.topics.reviews != DemoSetup().topics.reviews
    assert (noisy.job_name, noisy.job_identifier) != (DemoSetup().job_name, DemoSetup().job_identifier)


def test_the_noisy_spec_carries_its_comparison_settings(tmp_path: Path) -> None:
    stack = StackInfo(
        workdir=str(tmp_path), flink_home="/f", flink_conf_dir="/c", flink_python="/p", flink_rest_url="http://f",
        kafka_bootstrap="x:9092", chroma_host="127.0.0.1", chroma_port=8000, mem0_dir="/m", connector_jars=[],
        savepoint_dir="/s", checkpoint_dir="/k", java_home="/j", processes=[], env={}, connections_file="/x",
    )
    path = write_spec(stack, NOISY_DEMO.topics, tmp_path / "spec.yaml", job_name=NOISY_DEMO.job_name,
                      job_identifier=NOISY_DEMO.job_identifier, window_records=100, candidate=NOISY_DEMO.v2,
                      compare=NOISY_DEMO.compare)
    spec = yaml.safe_load(path.read_text())
    assert spec["compare"] == {"min_aligned": 20, "abs_threshold": 0.1, "alpha": 0.01}
    assert spec["candidate_agent_job"] == NOISY_DEMO.v2 and spec["window"]["records"] == 100


def test_airflow_gets_a_free_port_and_a_taken_one_is_refused_naming_the_option() -> None:
    assert demo._port(_args()) > 0  # any free port when nobody watches the UI
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match=rf"port {port} is taken .* --port"):
            demo._port(_args("--ui", "--port", str(port)))


def test_the_demo_spec_references_mem0s_llm_key_and_never_holds_it(tmp_path: Path) -> None:
    from airflow_flink_replay.local.demo import PLACEHOLDER_SECRETS, placeholder_key_file

    stack = StackInfo(
        workdir=str(tmp_path), flink_home="/f", flink_conf_dir="/c", flink_python="/p", flink_rest_url="http://f",
        kafka_bootstrap="x:9092", chroma_host="127.0.0.1", chroma_port=8000, mem0_dir="/m", connector_jars=[],
        savepoint_dir="/s", checkpoint_dir="/k", java_home="/j", processes=[], env={}, connections_file="/x",
    )
    key = placeholder_key_file(tmp_path / "demo")
    first = key.read_text()
    assert key.stat().st_mode & 0o777 == 0o600 and placeholder_key_file(tmp_path / "demo").read_text() != first
    path = write_spec(stack, DemoSetup().topics, tmp_path / "spec.yaml", name="shop-reviews", mem0_llm_key_file=key)
    text = path.read_text()
    assert yaml.safe_load(text)["name"] == "shop-reviews"  # not the last placeholder's file name
    llm = yaml.safe_load(text)["mem0_config"]["llm"]["config"]
    assert llm["api_key"] == f"${{file:{key}}}"
    assert key.read_text() not in text
    # the other shapes of a secret, each by reference, none of their values in the spec
    shapes = {k: (key.parent / name).read_text() for k, name in PLACEHOLDER_SECRETS.items()}
    assert shapes["app_name"].startswith("Bearer ") and "afr-demo:" in shapes["site_url"] and shapes["route"].isdigit()
    for config_key, name in PLACEHOLDER_SECRETS.items():
        assert llm[config_key] == f"${{file:{key.parent / name}}}" and shapes[config_key] not in text

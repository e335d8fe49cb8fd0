"""Secured Kafka on the job side, where the local broker allows it (issue 15).

tansu, the stack's broker, runs neither SASL nor TLS (docs/real-cluster.md says what was tried), so no gate
run against an authenticating broker happens here. What is checked on the real stack instead: production's
own program (``airflow_flink_replay.flink.production_job``), submitted over REST with ``--kafka-security``
(SASL_PLAINTEXT, SCRAM-SHA-256, the password as a ``${file:...}`` reference), builds its Kafka source with
those settings — the Kafka clients Flink's connector creates log their configuration, and theirs says
SASL_PLAINTEXT and SCRAM-SHA-256 with the JAAS config hidden — while the password itself is in no program
argument, no JobManager log, no REST answer about the job. The librdkafka side (capture tee, agent check) and
the replay job's spec are checked at unit level (tests/unit/core/test_kafka_security.py,
tests/unit/replay_dag/test_run.py).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.timeout(600)


def _config_dumps(log: Path, marker: str) -> list[str]:
    """The Kafka clients' configuration dumps in ``log`` that mention ``marker`` (a group or client id)."""
    text = log.read_text(errors="replace")
    blocks = re.split(r"\n(?=\S)", text)  # a dump is one INFO line followed by tab-indented "key = value" lines
    return [b for b in blocks if "Config values:" in b and marker in b]


def test_production_builds_its_kafka_clients_with_the_referenced_sasl_settings(stack: Any, tmp_path: Path) -> None:
    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import get_submitter
    from airflow_flink_replay.local.demo import AgentRef, DemoTopics, create_topics, production_program

    password = f"afr-kafka-password-{uuid.uuid4().hex}"
    secret = tmp_path / "kafka-password"
    secret.write_text(password)
    security = KafkaClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                                   sasl_username="afr-replay", sasl_password=f"${{file:{secret}}}")
    name = f"kafka-sec-{uuid.uuid4().hex[:6]}"
    topics = DemoTopics.named(name)
    create_topics(stack.kafka_bootstrap, topics)
    program = production_program(stack, topics, job_name=name, job_identifier=name, agent=AgentRef())
    program["program_args"] += ["--kafka-security", security.to_arg(), "--group-id", f"afr-{name}"]
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, flink_home=stack.flink_home))
    job_id = get_submitter("rest", hook).submit(FlinkPythonProgram.model_validate(program), timeout=240).job_id
    jm_log = Path(stack.workdir) / "logs" / "flink--standalonesession-0-vm.log"
    try:
        deadline, dumps = time.monotonic() + 120, []
        while time.monotonic() < deadline and not dumps:  # the source's enumerator builds its clients at start
            dumps = _config_dumps(jm_log, f"afr-{name}")
            time.sleep(2)
        assert dumps, f"no Kafka client of group afr-{name} logged its configuration in {jm_log}"
        for dump in dumps:
            assert re.search(r"security\.protocol = SASL_PLAINTEXT\b", dump), dump
            assert re.search(r"sasl\.mechanism = SCRAM-SHA-256\b", dump), dump
            assert re.search(r"sasl\.jaas\.config = \[hidden\]", dump), dump
        # the value was read inside Flink; it travelled nowhere anyone reading Flink can see
        seen = [requests.get(f"{stack.flink_rest_url}{path}", timeout=10).text
                for path in (f"/jobs/{job_id}", f"/jobs/{job_id}/config", f"/jobs/{job_id}/plan",
                             f"/jobs/{job_id}/exceptions", "/jobmanager/logs")]
        assert password not in "".join(seen) + jm_log.read_text(errors="replace")
    finally:
        hook.cancel_job(job_id)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
        admin.delete_topics([topics.reviews, topics.outputs, topics.capture, topics.action_state])

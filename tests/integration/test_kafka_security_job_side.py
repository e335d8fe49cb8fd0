"""Secured Kafka on the job side, where the local broker allows it (issue 15).

tansu, the stack's broker, runs neither SASL nor TLS (docs/real-cluster.md says what was tried), so no gate
run against an authenticating broker happens here. What is checked on the real stack instead: production's
own program (``airflow_flink_replay.flink.production_job``), submitted over REST with ``--kafka-security``
(SASL_PLAINTEXT, SCRAM-SHA-256, the password as a ``${file:...}`` reference), builds its Kafka source with
those settings — the Kafka clients Flink's connector creates log their configuration, and theirs says
SASL_PLAINTEXT and SCRAM-SHA-256 with the JAAS config hidden — while the password itself is in no program
argument, no JobManager log, no REST answer about the job. A replay job does the same with its bounded source,
and builds the sink of its outputs topic with them (read from the built KafkaSink: the broker refuses the
mechanism, so the job's tasks never start). The librdkafka side (capture tee, agent check, the audit producer)
and the replay job's spec are checked at unit level (tests/unit/core/test_kafka_security.py,
tests/unit/flink/test_audit_sink.py, tests/unit/replay_dag/test_run.py).
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


def _assert_sasl_dumps(log: Path, marker: str) -> None:
    """Wait for the Kafka clients of ``marker`` to log their configuration in ``log`` (a source's enumerator
    builds its clients when the job starts), then check each says SASL_PLAINTEXT / SCRAM-SHA-256, JAAS hidden."""
    deadline, dumps = time.monotonic() + 120, []
    while time.monotonic() < deadline and not dumps:
        dumps = _config_dumps(log, marker)
        time.sleep(2)
    assert dumps, f"no Kafka client of {marker} logged its configuration in {log}"
    for dump in dumps:
        assert re.search(r"security\.protocol = SASL_PLAINTEXT\b", dump), dump
        assert re.search(r"sasl\.mechanism = SCRAM-SHA-256\b", dump), dump
        assert re.search(r"sasl\.jaas\.config = \[hidden\]", dump), dump


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
        _assert_sasl_dumps(jm_log, f"afr-{name}")
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


#: Builds a replay job (nothing submitted) and reports what its outputs' KafkaSink was built with: the
#: producer properties it holds, the password compared inside this program and never printed.
SINK_SCRIPT = """
import json, sys
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.flink.environment import job_environment
from airflow_flink_replay.flink.replay_job import build_replay

spec = ReplayJobSpec.model_validate_json(sys.argv[1])
env = job_environment()
build_replay(env, spec)
sinks = [t for t in env._j_stream_execution_environment.getTransformations()
         if t.getClass().getSimpleName() == "SinkTransformation"]
sink = sinks[0].getSink()
field = sink.getClass().getDeclaredField("kafkaProducerConfig")
field.setAccessible(True)
props = field.get(sink)
config = {k: props.getProperty(k) for k in props.stringPropertyNames()}
jaas = config.pop("sasl.jaas.config", "")
print(json.dumps({"sink": sink.getClass().getSimpleName(), "config": config,
                  "jaas_has_password": open(sys.argv[2]).read() in jaas, "jaas_module": jaas.split(" ")[0]}))
"""


def test_a_replay_builds_its_source_and_result_sink_with_the_referenced_sasl_settings(
    stack: Any, tmp_path: Path
) -> None:
    """A replay job given the same description builds the sink of its outputs topic with SASL_PLAINTEXT,
    SCRAM-SHA-256 and a JAAS config holding the resolved password (the built KafkaSink's producer properties,
    read in a PyFlink program that builds the job), and, submitted, its bounded capture source (the
    enumerator's clients, in the JobManager) logs those settings with the JAAS config hidden; the password is in
    no REST answer or log. The local broker refuses the mechanism, so the job restarts until it is cancelled:
    its tasks never start, which is why the sink is read from the built job instead."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
    from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
    from airflow_flink_replay.core.results import ResultTopics
    from tests.integration import flink_side_helpers as fh

    password = f"afr-kafka-password-{uuid.uuid4().hex}"
    secret = tmp_path / "kafka-password"
    secret.write_text(password)
    security = KafkaClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                                   sasl_username="afr-replay", sasl_password=f"${{file:{secret}}}")
    run = uuid.uuid4().hex[:8]
    results = ResultTopics(outputs=f"ks-out-{run}", audit=f"ks-audit-{run}")
    topics = [f"ks-cap-{run}", *results.names()]
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(10)
    spec = ReplayJobSpec(
        variant="baseline", agent_factory="examples.review_agent.v1.agent:build_agent", job_identifier=f"ks-{run}",
        action_state_topic=f"ks-as-{run}", results=results, output_dir=str(tmp_path / "out"),
        audit_dir=str(tmp_path / "audit"), kafka_bootstrap=stack.kafka_bootstrap, kafka_security=security,
        capture_topic=topics[0], start_offsets={0: 0}, end_offsets={0: 5}, connector_jars=fh.JARS,
        mem0_config=fh.mem0_config(f"ks_{run}"), job_name=f"ks-{run}",
    )
    import json
    import subprocess

    built = subprocess.run([stack.flink_python, "-c", SINK_SCRIPT, spec.model_dump_json(), str(secret)],
                           capture_output=True, text=True, timeout=240, cwd=Path(__file__).resolve().parents[2])
    assert built.returncode == 0, built.stderr[-3000:]
    sink = json.loads(built.stdout.strip().splitlines()[-1])
    assert sink["sink"] == "KafkaSink" and sink["jaas_has_password"] is True, sink
    config = sink["config"]
    assert (config["security.protocol"], config["sasl.mechanism"]) == ("SASL_PLAINTEXT", "SCRAM-SHA-256"), config
    assert sink["jaas_module"] == "org.apache.kafka.common.security.scram.ScramLoginModule", sink
    assert password not in built.stdout + built.stderr
    jm_log = Path(stack.workdir) / "logs" / "flink--standalonesession-0-vm.log"
    job_id = fh.submit(fh.REPLAY_JOB, spec.to_argv())
    try:
        _assert_sasl_dumps(jm_log, f"afr-replay-ks-{run}-baseline")
        seen = [requests.get(f"{stack.flink_rest_url}{path}", timeout=10).text
                for path in (f"/jobs/{job_id}", f"/jobs/{job_id}/config", f"/jobs/{job_id}/exceptions")]
        assert password not in "".join(seen) + jm_log.read_text(errors="replace")
    finally:
        fh.cancel(job_id)
        for future in admin.delete_topics(topics).values():
            future.result(10)

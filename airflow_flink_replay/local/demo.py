"""The demo's production side on the local stack: the review agent v1 in production with the capture tee.

``deploy_production`` creates the topics, submits production (v1) with a Kafka action-state store and
the capture tee, feeds it reviews (which also seeds production's Mem0 memories: the agent writes one per
review) and writes the :class:`ReplaySpec` the DAGs load. ``ReviewFeeder`` keeps reviews flowing while
a replay DAG runs, so the capture window fills after production resumes.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pydantic import BaseModel

from airflow_flink_replay.local.stack import REPLAY_CONN_ID, StackInfo

PRODUCTION_JOB_NAME = "review-triage-production"
JOB_IDENTIFIER = "review-triage-prod"
#: The example agent's job definitions (production runs v1; v2 is the candidate whose prompt change the gate catches).
V1 = "examples.review_agent.v1.job:job"
V2 = "examples.review_agent.v2.job:job"
#: The same versions with the stand-in chat model sampling like an LLM (``flink-replay demo --noisy``).
V1_NOISY = "examples.review_agent.v1.job:noisy_job"
V2_NOISY = "examples.review_agent.v2.job:noisy_job"
AGENT_UID = "afr-agent"
PRODUCTION_JOB_SCRIPT = str(Path(__file__).resolve().parent.parent / "flink" / "production_job.py")
#: The production entry as a module of the job side (PythonDriver ``-pym``): the JobManager imports it from its
#: own Python, so (re)submitting production shares no file path with the Airflow worker.
PRODUCTION_JOB_MODULE = "airflow_flink_replay.flink.production_job"
#: How long the demo's cassette topic keeps production's recorded calls (a replay needs its window's only).
CASSETTE_RETENTION_MS = 7 * 24 * 3600 * 1000
#: How long the demo's memory journal keeps production's memory writes (a run reads it from its pre-copy on).
MEMORY_JOURNAL_RETENTION_MS = 24 * 3600 * 1000


class DemoTopics(BaseModel):
    """Production's topics (one set per demo instance, so tests can run side by side)."""

    reviews: str
    outputs: str
    capture: str
    action_state: str
    #: production records its tool calls here (``--cassette-topic``): the replays are served its results
    cassette: str | None = None
    #: production journals its memory writes here (``--memory-journal-topic``): the memory cut reads only those
    memory_journal: str | None = None

    @classmethod
    def named(cls, prefix: str) -> DemoTopics:
        """Topics ``<prefix>-reviews`` etc."""
        return cls(
            reviews=f"{prefix}-reviews",
            outputs=f"{prefix}-outputs",
            capture=f"{prefix}-capture",
            action_state=f"{prefix}-action-state",
            cassette=f"{prefix}-cassette",
            memory_journal=f"{prefix}-memory-journal",
        )


class DemoSetup(BaseModel):
    """Which production the demo deploys (its topics, Flink job name, job identifier, agent), the candidates its
    gate runs get and the spec's comparison settings."""

    prefix: str = "demo"
    job_name: str = PRODUCTION_JOB_NAME
    job_identifier: str = JOB_IDENTIFIER
    v1: str = V1
    v2: str = V2
    compare: dict[str, Any] = {}
    #: reviews per second fed to production while a gate run waits for its window
    feed_rate: float = 4.0

    @property
    def topics(self) -> DemoTopics:
        """Production's topics."""
        return DemoTopics.named(self.prefix)


#: The demo with the stand-in chat model sampling like an LLM: its own production, the gate blocking changes of
#: at least 10 points of outputs (the two baselines differ by chance in a few) with a false-alarm level of at
#: most 1 % (docs/comparison.md; benchmarks/noisy_gate.py measures it).
NOISY_DEMO = DemoSetup(
    prefix="noisy-demo",
    job_name="review-triage-noisy",
    job_identifier="review-triage-noisy",
    v1=V1_NOISY,
    v2=V2_NOISY,
    compare={"abs_threshold": 0.1, "alpha": 0.01},
    feed_rate=10.0,
)


class AgentRef(BaseModel):
    """Which agent production runs: a job definition (``--agent-job``) or an agent factory (``--agent-factory``),
    as ``"module:attr"``."""

    reference: str = V1
    kind: Literal["agent_job", "agent_factory"] = "agent_job"
    #: ``--key-field`` (None: the entry's default, ``customer``)
    key_field: str | None = None

    @property
    def option(self) -> str:
        """The production entry's option for it."""
        return "--agent-job" if self.kind == "agent_job" else "--agent-factory"


def production_program(
    stack: StackInfo, topics: DemoTopics, job_name: str, job_identifier: str, agent: AgentRef | None = None
) -> dict[str, Any]:
    """The FlinkPythonProgram (as a dict) that (re)submits production (the demo's v1 unless ``agent``)."""
    agent = agent or AgentRef()
    return {
        "module": PRODUCTION_JOB_MODULE,
        "program_args": [
            agent.option, agent.reference,
            "--bootstrap", stack.kafka_bootstrap,
            "--source-topic", topics.reviews,
            "--sink-topic", topics.outputs,
            "--capture-topic", topics.capture,
            *(["--cassette-topic", topics.cassette] if topics.cassette else []),
            *(["--memory-journal-topic", topics.memory_journal] if topics.memory_journal else []),
            "--action-state-topic", topics.action_state,
            "--job-identifier", job_identifier,
            "--agent-uid", AGENT_UID,
            "--mem0-config", json.dumps(stack.mem0_config()),
            "--jars", ",".join(stack.connector_jars),
            "--job-name", job_name,
            *(["--key-field", agent.key_field] if agent.key_field else []),
        ],
        "job_name": job_name,
    }


def create_topics(bootstrap: str, topics: DemoTopics, partitions: int = 2) -> None:
    """Create production's topics (idempotent); the action-state topic is compacted."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    new = []
    for name in (topics.reviews, topics.outputs, topics.capture):
        if name not in existing:
            new.append(NewTopic(name, num_partitions=partitions, replication_factor=1))
    if topics.cassette and topics.cassette not in existing:  # bounded: a week, and at most 1 GiB a partition
        new.append(NewTopic(topics.cassette, num_partitions=partitions, replication_factor=1,
                            config={"retention.ms": str(CASSETTE_RETENTION_MS), "retention.bytes": str(1 << 30)}))
    if topics.memory_journal and topics.memory_journal not in existing:  # a run reads it from its pre-copy on
        new.append(NewTopic(topics.memory_journal, num_partitions=1, replication_factor=1,
                            config={"retention.ms": str(MEMORY_JOURNAL_RETENTION_MS)}))
    if topics.action_state not in existing:
        new.append(NewTopic(topics.action_state, num_partitions=1, replication_factor=1,
                            config={"cleanup.policy": "compact"}))
    for fut in admin.create_topics(new).values() if new else []:
        fut.result(15)


def produce_reviews(bootstrap: str, topic: str, reviews: list[dict[str, Any]]) -> None:
    """Produce reviews keyed by customer, timestamped by event time, one record per batch (tansu)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for review in reviews:
        producer.produce(topic, key=str(review["customer"]).encode(), value=json.dumps(review).encode(),
                         timestamp=int(review["ts"]))
        producer.flush(10)


class PacedFeeder:
    """Calls :meth:`send_one` in a background thread, ``rate`` times a second, from entering the ``with``
    block until it returns False or the block is left."""

    def __init__(self, rate: float, name: str) -> None:
        self.rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def send_one(self) -> bool:
        """Produce one record; False when there is nothing more to send."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set() and self.send_one():
            self._stop.wait(1.0 / self.rate)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class ReviewFeeder(PacedFeeder):
    """Produces reviews in the background (``rate`` per second) until stopped, or after ``count`` reviews."""

    def __init__(
        self, bootstrap: str, topic: str, *, start_index: int, rate: float = 4.0, seed: int = 11,
        count: int | None = None,
    ) -> None:
        super().__init__(rate, "review-feeder")
        self.bootstrap, self.topic, self.seed = bootstrap, topic, seed
        self.next_index = start_index
        self.end = None if count is None else start_index + count

    def send_one(self) -> bool:
        """Produce the next generated review (False once ``count`` were produced)."""
        from examples.review_agent.common.generator import generate_reviews

        if self.end is not None and self.next_index >= self.end:
            return False

        batch = generate_reviews(1, seed=self.seed + self.next_index, id_prefix=f"f{self.next_index}")
        produce_reviews(self.bootstrap, self.topic, list(batch))
        self.next_index += 1
        return True


def write_spec(
    stack: StackInfo,
    topics: DemoTopics,
    path: Path,
    *,
    name: str = "review-triage",
    job_name: str = PRODUCTION_JOB_NAME,
    job_identifier: str = JOB_IDENTIFIER,
    window_records: int = 40,
    runs_dir: Path | None = None,
    agent: AgentRef | None = None,
    candidate: str | None = V2,
    compare: dict[str, Any] | None = None,
    mem0_llm_key_file: Path | None = None,
    timing: Mapping[str, Any] | None = None,
) -> Path:
    """Write a ReplaySpec YAML (what a team writes once per production job): the demo's, or with ``agent`` and
    ``candidate`` the one of a production deployed by ``flink-replay deploy``. With ``mem0_llm_key_file``
    Mem0's LLM takes its key from that file by reference (``${file:...}``), as a team's spec would. ``timing``:
    production's ``event_time`` / ``watermark`` and a ``quiesce_mode`` other than ``drain``
    (:func:`airflow_flink_replay.commands.deploy.spec_timing`)."""
    timing = dict(timing or {})
    agent = agent or AgentRef()
    mem0_config = stack.mem0_config()
    if mem0_llm_key_file is not None:  # never called: the demo's memories are stored as they are (no inference)
        llm = {"api_key": f"${{file:{mem0_llm_key_file}}}", "openai_base_url": "http://127.0.0.1:9/v1"}
        for key, file_name in PLACEHOLDER_SECRETS.items():  # the other shapes of a secret, by reference alike
            if (mem0_llm_key_file.parent / file_name).is_file():
                llm[key] = f"${{file:{mem0_llm_key_file.parent / file_name}}}"
        mem0_config["llm"] = {"provider": "openai", "config": llm}
    spec: dict[str, Any] = {
        "name": name,
        "production": {
            "job_name": job_name,
            "program": production_program(stack, topics, job_name, job_identifier, agent),
            agent.kind: agent.reference,
            "input_topic": topics.reviews,
            "capture_topic": topics.capture,
            "output_topic": topics.outputs,
            **({"cassette_topic": topics.cassette} if topics.cassette else {}),
            **({"memory_journal_topic": topics.memory_journal} if topics.memory_journal else {}),
            "action_state_topic": topics.action_state,
            "action_state_partitions": 1,
            "job_identifier": job_identifier,
            **({"key_field": agent.key_field or "customer"} if agent.kind == "agent_factory" else {}),
            "agent_uid": AGENT_UID,
            **{k: timing[k] for k in ("event_time", "watermark") if k in timing},
        },
        **({f"candidate_{agent.kind}": candidate} if candidate else {}),
        "quiesce_mode": timing.get("quiesce_mode", "drain"),
        "window": {"records": window_records, "timeout_minutes": 10,
                   **({"outputs_tied_by": timing["outputs_tied_by"]} if "outputs_tied_by" in timing else {})},
        "compare_key": "$.id",
        "compare": {"min_aligned": min(20, window_records), **(compare or {})},
        "kafka_bootstrap": stack.kafka_bootstrap,
        # replays run on the stack's replay cluster: a replay can never take production's cluster down
        "replay_flink_conn_id": REPLAY_CONN_ID if stack.replay_flink_rest_url else None,
        "connector_jars": stack.connector_jars,
        "mem0_config": mem0_config,
        "runs_uri": f"file://{runs_dir or Path(stack.workdir) / 'runs'}",
        "savepoint_dir": f"file://{stack.savepoint_dir}",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


#: Mem0's OpenAI LLM config keys the demo's spec also fills by reference, and the files next to the API key that
#: hold them: a header value, a URL with a password and a number (mem0 uses them only with OpenRouter: never sent).
PLACEHOLDER_SECRETS = {"app_name": "llm-header", "site_url": "llm-site-url", "route": "llm-route"}


def placeholder_key_file(folder: Path) -> Path:
    """A file holding a fresh random placeholder API key (owner-readable only): the secret the demo's spec
    references, so a run shows where a secret does and does not travel. Next to it, fresh placeholders of the
    other shapes a secret takes (:data:`PLACEHOLDER_SECRETS`): ``Bearer <token>``, a URL with a password, digits."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {
        "llm-api-key": f"afr-demo-{secrets.token_hex(16)}",
        "llm-header": f"Bearer afr-demo-header-{secrets.token_hex(8)}",
        "llm-site-url": f"https://afr-demo:afr-demo-pw-{secrets.token_hex(8)}@openrouter.invalid/site",
        "llm-route": str(secrets.randbits(59) + 10**17),
    }
    for name, value in values.items():
        path = folder / name
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(value)
    return folder / "llm-api-key"


def submit_production(
    stack: StackInfo,
    topics: DemoTopics,
    *,
    job_name: str,
    job_identifier: str,
    agent: AgentRef | None = None,
    timeout: float = 240.0,
) -> tuple[str, bool]:
    """Create production's topics and submit it unless a job of that name runs (or is about to: starting,
    restarting); wait until all its tasks run.

    Returns the job id and whether it was submitted now (False: it was there already)."""
    from airflow_flink_replay.core.flink_models import LIVE_STATES, FlinkPythonProgram
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter

    create_topics(stack.kafka_bootstrap, topics)
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    running = hook.list_jobs().by_name(job_name, states=LIVE_STATES)
    if running:
        return running[0].jid, False
    program = FlinkPythonProgram.model_validate(production_program(stack, topics, job_name, job_identifier, agent))
    job_id = RestPythonSubmitter(hook, flink_home=stack.flink_home).submit(program).job_id
    hook.wait_for_job_state(job_id, ("RUNNING",), timeout=timeout, all_tasks_running=True)
    return job_id, True


def deploy_demo(stack: StackInfo, setup: DemoSetup) -> str:
    """:func:`deploy_production` of the demo ``setup``'s production."""
    return deploy_production(stack, setup.topics, job_name=setup.job_name, job_identifier=setup.job_identifier,
                             agent=AgentRef(reference=setup.v1))


def raw_downtime(stack: StackInfo, setup: DemoSetup, *, poll: float = 0.1) -> float:
    """Production's downtime when stopped and brought back by hand (:mod:`~airflow_flink_replay.local.raw_restore`:
    drain, resubmit from the savepoint, every vertex RUNNING; no offsets, no memory cut): the floor the gate
    runs' stop windows are measured against. Production keeps running afterwards, as a new job."""
    import shutil

    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
    from airflow_flink_replay.local.raw_restore import raw_drain_and_restore

    flink = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    running = flink.list_jobs().by_name(setup.job_name, states=frozenset({"RUNNING"}))
    if not running:
        raise RuntimeError(f"production {setup.job_name!r} is not running")
    program = production_program(stack, setup.topics, setup.job_name, setup.job_identifier,
                                 AgentRef(reference=setup.v1))
    jar_id = RestPythonSubmitter(flink, flink_home=stack.flink_home).python_jar_id()
    folder = Path(stack.savepoint_dir) / f"{setup.prefix}-raw"
    try:
        downtime, _ = raw_drain_and_restore(stack.flink_rest_url, running[0].jid, jar_id,
                                            FlinkPythonProgram.model_validate(program).driver_args(),
                                            f"file://{folder}", poll)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return downtime


def deploy_production(
    stack: StackInfo,
    topics: DemoTopics,
    *,
    job_name: str = PRODUCTION_JOB_NAME,
    job_identifier: str = JOB_IDENTIFIER,
    initial_reviews: int = 30,
    timeout: float = 240.0,
    agent: AgentRef | None = None,
) -> str:
    """Create topics, submit production (v1 unless ``agent``), feed ``initial_reviews`` and wait until they are
    processed."""
    from examples.review_agent.common.generator import generate_reviews

    job_id, submitted = submit_production(stack, topics, job_name=job_name, job_identifier=job_identifier,
                                          agent=agent, timeout=timeout)
    if not submitted:
        return job_id
    produce_reviews(stack.kafka_bootstrap, topics.reviews, list(generate_reviews(initial_reviews, seed=7)))
    _wait_for_outputs(stack.kafka_bootstrap, topics.outputs, initial_reviews, timeout)
    return job_id


def _wait_for_outputs(bootstrap: str, topic: str, n: int, timeout: float) -> None:
    """Wait until production wrote ``n`` outputs (its memories are then in Mem0).

    Counts by consuming: tansu's high watermark is wrong for the multi-record batches Flink's sink writes.
    """
    from confluent_kafka import Consumer, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-wait-{time.time()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while seen < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
    finally:
        consumer.close()
    if seen < n:
        raise TimeoutError(f"production wrote {seen} of {n} outputs to {topic} within {timeout:.0f}s")

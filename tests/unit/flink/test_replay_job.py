"""The replay job: the job graph a spec builds (source, watermarks, pinned agent, outputs to files or result
topics), the agent's isolated store, identity and guard, and what the program submits — or refuses to.

The parts that need no PyFlink run here; the job graphs are built in the Flink-side Python (PyFlink's local
gateway, the stack's connector jars; nothing is submitted). There, a submission is played by fakes named so
(``fake_execute``, ``fake_execute_async``: no cluster here) and so is the program's own ``os._exit``; the real
``agents_environment`` and ``agent_plan_of`` are wrapped by spies that keep what they returned. (Replays
running for real: tests/integration/test_flink_side*.py, test_replay_results_topics.py.)
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.manifest_io import save_manifest
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.results import AuditTopic
from airflow_flink_replay.flink.replay_job import (
    describe,
    digest_of_output,
    guard_config,
    load_replay_job,
    main,
    refuse_production_targets,
)
from airflow_flink_replay.flink.unmediated import GUARD_CONFIG_KEY
from tests.flink_python import CONNECTOR_JARS, flink_side_facts

SPEC: dict[str, Any] = {
    "variant": "candidate", "agent_job": "pkg.jobs:job", "job_identifier": "replay-t1-candidate",
    "action_state_topic": "afr-t1-candidate", "output_dir": "/runs/t1/candidate", "audit_dir": "/runs/t1/audit",
    "kafka_bootstrap": "kafka:9092", "capture_topic": "reviews-capture", "start_offsets": {0: 3, 1: 0},
    "end_offsets": {0: 9, 1: 4},
}  # fmt: skip


def _spec(**changes: Any) -> ReplayJobSpec:
    return ReplayJobSpec.model_validate({**SPEC, **changes})


# ------------------------------------------------------------------------------------------ without PyFlink
def test_outputs_are_numbered_by_their_content_not_by_replay_bookkeeping_or_key_order() -> None:
    one = digest_of_output('{"id": "r1", "label": "negative", "_replay": {"variant": "baseline", "watermark_ms": 5}}')
    again = digest_of_output('{"label": "negative", "id": "r1", "_replay": {"variant": "baseline", "watermark_ms": 9}}')
    other = digest_of_output('{"id": "r1", "label": "neutral"}')
    assert one == again != other
    assert len(one) == 16 and int(one, 16) >= 0


def test_describe_names_the_variant_window_and_timing() -> None:
    described = json.loads(describe(_spec(watermark="bounded:2000").model_dump_json()))
    assert described["variant"] == "candidate"
    assert described["window"] == {"topic": "reviews-capture", "start_offsets": {"0": 3, "1": 0},
                                   "end_offsets": {"0": 9, "1": 4}}  # fmt: skip
    assert described["timing"]["watermark"] == "bounded:2000"
    assert described["timing"]["origin"]["watermark"] == "spec"


def test_the_guard_is_armed_for_the_runtime_copy_s_own_module_with_the_policy_s_decision() -> None:
    entry = json.loads(guard_config(_spec(policy={"unmediated": "block"}), "airflow_flink_replay")[GUARD_CONFIG_KEY])
    assert entry == {"module": "airflow_flink_replay.flink.unmediated", "variant": "candidate",
                     "audit_dir": "/runs/t1/audit", "decision": "block"}  # fmt: skip
    assert json.loads(guard_config(_spec(), "airflow_flink_replay")[GUARD_CONFIG_KEY])["decision"] == "record"


def test_with_result_topics_the_guard_audits_to_the_variant_s_audit_topic() -> None:
    spec = _spec(results={"outputs": "afr-t1-candidate-outputs", "audit": "afr-t1-candidate-audit"})
    entry = json.loads(guard_config(spec, "airflow_flink_replay")[GUARD_CONFIG_KEY])
    assert AuditTopic.parse(entry["audit_dir"]).topic == "afr-t1-candidate-audit"


def test_an_unmediated_replay_arms_no_guard() -> None:
    """It reproduces production's exact actions: nothing of this package may run in them."""
    assert guard_config(_spec(mediate_resources=False), "airflow_flink_replay") == {}


def test_a_spec_without_production_s_names_is_built_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        refuse_production_targets(_spec())
    assert "replay candidate: production's action-state topic / job identifier are not in the spec" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        refuse_production_targets(_spec(production_action_state_topic="prod-as", production_job_identifier="prod-ns"))
    assert caplog.text == ""


def test_a_program_without_a_spec_is_refused_naming_the_arguments() -> None:
    with pytest.raises(ValueError, match=r"replay_job needs --spec-json <json> or --spec-file <path> \(repeatable\)"):
        main(["--production-agent-uid", "afr-agent"])


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh package with a job definition and an agent factory (an "agent" is any object here)."""
    name = f"afr_replay_job_test_{uuid.uuid4().hex[:8]}"
    (tmp_path / "src" / name).mkdir(parents=True)
    (tmp_path / "src" / name / "__init__.py").write_text("")
    (tmp_path / "src" / name / "jobs.py").write_text(
        "from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey\n\n"
        "class Agent:\n    def __init__(self, **made_with):\n        self.made_with = made_with\n\n"
        "job = AgentJob(agent=Agent(), key_selector=FieldKey('id'))\n\n"
        "def build_agent(mem0_config=None, **options):\n    return Agent(mem0_config=mem0_config, **options)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    modules = set(sys.modules)
    yield name
    for module in set(sys.modules) - modules:
        del sys.modules[module]


def test_the_job_definition_is_loaded_from_a_content_hashed_copy(package: str, tmp_path: Path) -> None:
    job, module = load_replay_job(_spec(agent_job=f"{package}.jobs:job"), tmp_path / "build")
    assert module.startswith("afr_build_") and module.endswith(".jobs")
    assert type(job.build_agent()).__module__ == module, "the agent comes from the copy too"
    _, plain = load_replay_job(_spec(agent_job=f"{package}.jobs:job", isolate_agent_build=False), tmp_path / "b2")
    assert plain == f"{package}.jobs"


def test_the_factory_form_gets_the_spec_s_store_options_and_key_field(package: str, tmp_path: Path) -> None:
    spec = _spec(agent_job=None, agent_factory=f"{package}.jobs:build_agent", mem0_config={"vector_store": {}},
                 agent_options={"threshold": 2}, key_field="customer", isolate_agent_build=False)  # fmt: skip
    job, module = load_replay_job(spec, tmp_path / "build")
    assert module == f"{package}.jobs"
    assert job.build_agent().made_with == {"mem0_config": {"vector_store": {}}, "threshold": 2}
    raw = b'{"customer": 12, "id": "r1"}'
    assert job.key_selector(job.deserializer(raw)) == "12" and job.key_type == "string"


EXITS = textwrap.dedent(
    """
    import sys
    from airflow_flink_replay.flink.agent_build import build_folder
    from airflow_flink_replay.flink.replay_job import exit_after_submitting
    folder = build_folder("afr-test-exit-")
    sys.stdout.write(f"{folder}\\nsubmitted, not yet flushed")
    exit_after_submitting()
    print("never reached")
    """
)


def test_the_program_ends_as_soon_as_its_jobs_are_submitted_leaving_nothing_behind() -> None:
    proc = subprocess.run([sys.executable, "-c", EXITS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder, tail = proc.stdout.split("\n")
    assert tail == "submitted, not yet flushed", "the output is flushed before the process ends"
    assert not Path(folder).exists(), "the build folder is removed"


# ------------------------------------------------------------------------------------- the built job graphs
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway
    from airflow_flink_replay.core.identity import IdentityPlan
    from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
    from airflow_flink_replay.core.replay_plans import IdentityCheck
    from airflow_flink_replay.flink import pipeline, replay_job
    from airflow_flink_replay.flink.environment import job_environment

    tmp, manifest, production_plan, jars = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    jvm = get_gateway().jvm

    def spec(variant, **changes):
        base = dict(variant=variant, agent_job="tests.jobs.counter_agent.job:production",
                    job_identifier=f"replay-{variant}", action_state_topic=f"as-{variant}",
                    production_action_state_topic="prod-as", production_job_identifier="prod-ns",
                    output_dir=f"{tmp}/{variant}/out", audit_dir=f"{tmp}/{variant}/audit", kafka_bootstrap="kafka:9092",
                    capture_topic="cap", start_offsets={0: 3}, end_offsets={0: 9}, connector_jars=jars)
        return ReplayJobSpec(**{**base, **changes})

    seen = {}
    real_agents_environment, real_plan_of = pipeline.agents_environment, pipeline.agent_plan_of

    def spy_agents_environment(env, config, job=None):  # a spy: the real function runs
        seen["agents_env"] = real_agents_environment(env, config, job)
        return seen["agents_env"]

    def spy_plan_of(builder):  # a spy: the real function runs
        seen["plan"] = real_plan_of(builder)
        return seen["plan"]

    pipeline.agents_environment, pipeline.agent_plan_of = spy_agents_environment, spy_plan_of

    def conf(env):
        return dict(jvm.org.apache.flink.python.util.PythonConfigUtil.getEnvironmentConfig(
            env._j_stream_execution_environment).toMap())

    def sink_of(node):
        try:
            return node.getOperatorFactory().getSink().getClass().getSimpleName()
        except Exception:  # not a sink writer
            return None

    def build(s):
        seen.clear()
        env = job_environment()
        replay_job.build_replay(env, s)
        nodes = {}
        for node in env._generate_stream_graph(clear_transformations=True, job_name="g").getStreamNodes().toArray():
            edges = [e.getPartitioner().toString() for e in node.getInEdges().toArray()]
            nodes[node.getOperatorName()] = {"uid": node.getTransformationUID(), "hash": node.getUserHash(),
                                             "max_parallelism": node.getMaxParallelism(), "in": edges,
                                             "sink": sink_of(node)}
        plan = seen.get("plan")
        return {"nodes": nodes, "conf": conf(env), "max_parallelism": env.get_max_parallelism(),
                "parallelism": env.get_parallelism(),
                "checkpoint_ms": env.get_checkpoint_config().get_checkpoint_interval(),
                "agent_config": dict(seen["agents_env"].get_config().get_conf_data()),
                "tools": None if plan is None else {
                    name: f"{type(p).__name__}:{getattr(p, 'module', '')}"
                    for name, p in plan.resource_providers[[t for t in plan.resource_providers
                                                            if t.value == "tool"][0]].items()}}

    out = {}
    out["files"] = build(spec("baseline", agent_uid="afr-agent", max_parallelism=64, parallelism=2,
                              checkpoint_interval_ms=1500, policy={"unmediated": "block"}))
    out["files_out_dir"] = __import__("os").path.isdir(f"{tmp}/baseline/out")
    candidate = spec("candidate", watermark="none", agent_uid_hash="ABCDEF0123456789ABCDEF0123456789",
                     mediate_resources=False, results={"outputs": "cand-outputs", "audit": "cand-audit"},
                     agent_config={"num-async-threads": 4})
    # production's store and namespace in its agent options, past the spec's validation (which refuses them):
    # the job side's own entries still win
    out["topics"] = build(candidate.model_copy(update={"agent_config": {
        "num-async-threads": 4, "kafkaActionStateTopic": "prod-as", "job-identifier": "prod-ns"}}))
    out["topics_out_dir"] = __import__("os").path.isdir(f"{tmp}/candidate/out")
    untouched = job_environment()
    try:
        replay_job.build_replay(untouched, spec("tampered", manifest=manifest, capture_topic=None,
                                                start_offsets=None, end_offsets=None))
    except Exception as exc:
        out["tampered"] = [type(exc).__name__, str(exc).splitlines()[0]]
    out["tampered_conf"] = conf(untouched).get("pipeline.jars")

    submitted = []
    def fake_execute(env, name):  # a fake of the submission: no cluster here
        submitted.append(["execute", name])
    def fake_execute_async(env, name):  # a fake of the submission: no cluster here
        submitted.append(["execute_async", name])
        class Client:
            def get_job_id(self):
                return "f" * 32
        return Client()
    StreamExecutionEnvironment.execute, StreamExecutionEnvironment.execute_async = fake_execute, fake_execute_async
    replay_job.exit_after_submitting = lambda: submitted.append(["exit"])  # a fake: the real one ends the process

    def run(argv):
        submitted.clear()
        try:
            replay_job.main(argv)
            return {"submitted": list(submitted)}
        except Exception as exc:
            return {"submitted": list(submitted), "error": [type(exc).__name__, str(exc)]}

    good, named = spec("baseline"), spec("baseline_2", job_name="afr-replay-gate-r1-baseline_2")
    broken = spec("candidate", agent_job="no_such_pkg.jobs:job")
    out["main_one"] = run(good.to_argv())
    out["main_two"] = run([*named.to_argv(), *spec("candidate").to_argv()])
    out["main_broken"] = run([*good.to_argv(), *broken.to_argv()])
    check = IdentityCheck(production=IdentityPlan.from_rest(json.load(open(production_plan))),
                          production_agent_uid="afr-agent")
    mapping = dict(agent_uid="afr-agent", max_parallelism=128)
    refused = spec("candidate", agent_uid="afr-agent", max_parallelism=64)
    out["main_refused"] = run([*spec("baseline", **mapping).to_argv(), *refused.to_argv(), *check.to_argv()])

    numbering = replay_job.output_numbering()
    class FakeState:  # stands for the keyed ValueState of one digest (only a running task has keyed state)
        def __init__(self):
            self.v = None
        def value(self):
            return self.v
        def update(self, v):
            self.v = v
    class Ctx:  # stands for the runtime and element contexts of a running task
        descriptors = []
        def get_state(self, descriptor):
            Ctx.descriptors.append(descriptor.get_name())
            return FakeState()
        def get_current_key(self):
            return "0123456789abcdef"
    numbering.open(Ctx())
    out["numbered"] = [next(numbering.process_element('{"id": "r1"}', Ctx())) for _ in range(2)]
    out["numbering_state"] = Ctx.descriptors
    print(json.dumps(out))
    """
)

PLANS = Path(__file__).resolve().parents[2] / "fixtures" / "plans"


def _tampered_manifest(folder: Path) -> Path:
    manifest = ReplayManifest.model_validate({
        "run_id": "run-1",
        "production": {"job_id": "4" * 32, "job_name": "prod",
                       "savepoint": {"path": "file:///sp", "quiesce_mode": "drain"},
                       "agent": {"vertex_id": "a" * 32, "parallelism": 1, "max_parallelism": 64}},
        "capture": {"kafka_conn_id": "kafka_default", "topic": "cap",
                    "partitions": [{"partition": 0, "start_offset": 1, "end_offset": 4, "record_count": 3,
                                    "first_timestamp_ms": 1_000, "last_timestamp_ms": 3_000}]},
    })  # fmt: skip
    path = folder / "manifest.json"
    save_manifest(manifest, str(path))
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][0]["end_offset"] = 9  # widened by hand after it was sealed
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("replay-job")
    return flink_side_facts(SCRIPT, str(tmp), str(_tampered_manifest(tmp)), str(PLANS / "agent_prod_job_details.json"),
                            *CONNECTOR_JARS, jars=True)  # fmt: skip


def test_the_capture_window_is_read_then_production_s_watermarks_then_the_agent(built: dict[str, Any]) -> None:
    nodes = built["files"]["nodes"]
    assert nodes["Source: replay-capture-source"]["uid"] == "afr-replay-source"
    assert nodes["Timestamps/Watermarks"]["uid"] == "afr-replay-watermarks", "monotonous without a manifest"
    assert nodes["action-execute-operator"]["uid"] == "afr-agent"
    assert nodes["action-execute-operator"]["in"] == ["HASH"], "keyed by the job's key selector"
    assert "Timestamps/Watermarks" not in built["topics"]["nodes"], "watermark none: no operator"


def test_without_result_topics_outputs_go_to_files_in_the_output_dir(built: dict[str, Any]) -> None:
    nodes = built["files"]["nodes"]
    assert nodes["replay-output: Writer"]["uid"] == "afr-replay-sink"
    assert nodes["replay-output: Writer"]["sink"] == "FileSink"
    assert "output-ids" not in nodes
    assert built["files_out_dir"] and not built["topics_out_dir"]


def test_with_result_topics_outputs_are_numbered_by_content_then_sent_to_kafka(built: dict[str, Any]) -> None:
    nodes = built["topics"]["nodes"]
    assert nodes["output-ids"]["uid"] == "afr-replay-output-ids"
    assert nodes["output-ids"]["in"] == ["HASH"], "keyed by the output's digest"
    assert nodes["replay-output: Writer"]["uid"] == "afr-replay-sink"
    assert nodes["replay-output: Writer"]["sink"] == "KafkaSink"


def test_outputs_get_ids_counted_per_digest(built: dict[str, Any]) -> None:
    first, second = (json.loads(line) for line in built["numbered"])
    assert first == {"id": "r1", "_replay": {"output_id": "0123456789abcdef:1"}}
    assert second["_replay"]["output_id"] == "0123456789abcdef:2"
    assert built["numbering_state"] == ["afr-output-count"]


def test_max_parallelism_is_pinned_job_wide_not_only_on_the_agent(built: dict[str, Any]) -> None:
    files = built["files"]
    assert files["max_parallelism"] == 64
    assert {n["max_parallelism"] for n in files["nodes"].values()} == {64}, "every operator mapped to state"
    assert (files["parallelism"], files["checkpoint_ms"]) == (2, 1500)
    assert built["topics"]["max_parallelism"] == -1, "unpinned: Flink's own"


def test_a_uid_hash_pins_the_agent_s_state_id(built: dict[str, Any]) -> None:
    agent = built["topics"]["nodes"]["action-execute-operator"]
    assert (agent["uid"], agent["hash"]) == (None, "abcdef0123456789abcdef0123456789")


def test_the_connector_jars_come_before_flink_agents_jar(built: dict[str, Any]) -> None:
    jars = built["files"]["conf"]["pipeline.jars"]
    positions = [jars.find(Path(j).name) for j in CONNECTOR_JARS]
    assert all(p >= 0 for p in positions), jars
    agents = jars.find("flink_agents")
    assert agents == -1 or agents > max(positions), "kafka-clients of the connector first"
    assert "python.files" in built["files"]["conf"], "the isolated build is shipped with the job"


def test_the_agent_uses_the_replay_s_own_store_and_namespace(built: dict[str, Any]) -> None:
    config = built["files"]["agent_config"]
    assert (config["kafkaActionStateTopic"], config["job-identifier"]) == ("as-baseline", "replay-baseline")
    assert built["topics"]["agent_config"]["num-async-threads"] == 4, "the spec's extra agent options"


def test_a_mediated_replay_proxies_the_agent_s_tools_and_arms_the_guard(built: dict[str, Any]) -> None:
    files = built["files"]
    guard = json.loads(files["agent_config"][GUARD_CONFIG_KEY])
    assert guard["module"].startswith("afr_rt_") and guard["module"].endswith(".flink.unmediated")
    assert (guard["variant"], guard["decision"]) == ("baseline", "block")
    assert set(files["tools"]) == {"annotate", "open_ticket"}
    runtime = {kind.split(":")[1].removesuffix(".flink.proxies") for kind in files["tools"].values()}
    assert runtime == {guard["module"].removesuffix(".flink.unmediated")}, "the proxies of the guard's runtime copy"


def test_an_unmediated_replay_runs_the_agent_as_production_did(built: dict[str, Any]) -> None:
    assert built["topics"]["tools"] is None, "no plan hook"
    assert GUARD_CONFIG_KEY not in built["topics"]["agent_config"]


def test_agent_config_cannot_point_the_replay_at_production_s_state(built: dict[str, Any]) -> None:
    config = built["topics"]["agent_config"]  # its spec's agent_config names production's topic and identifier
    assert (config["kafkaActionStateTopic"], config["job-identifier"]) == ("as-candidate", "replay-candidate")


def test_a_manifest_edited_after_it_was_sealed_stops_the_build_before_anything_is_added(
    built: dict[str, Any],
) -> None:
    kind, first_line = built["tampered"]
    assert kind == "ManifestTamperedError" and "tampered" in first_line
    assert built["tampered_conf"] is None, "no connector jar was added: nothing was built"


def test_one_spec_is_executed_under_its_replay_name(built: dict[str, Any]) -> None:
    assert built["main_one"] == {"submitted": [["execute", "afr-replay-baseline"]]}


def test_several_specs_are_each_submitted_then_the_program_ends(built: dict[str, Any]) -> None:
    assert built["main_two"] == {"submitted": [["execute_async", "afr-replay-gate-r1-baseline_2"],
                                               ["execute_async", "afr-replay-candidate"], ["exit"]]}  # fmt: skip


def test_a_variant_that_cannot_be_built_stops_the_program_before_any_is_submitted(built: dict[str, Any]) -> None:
    broken = built["main_broken"]
    assert broken["submitted"] == []
    assert broken["error"] == ["ValueError", "package 'no_such_pkg' is not importable here"]


def test_a_variant_whose_graph_does_not_map_refuses_the_whole_submission(built: dict[str, Any]) -> None:
    refused = built["main_refused"]
    assert refused["submitted"] == []
    kind, message = refused["error"]
    assert kind == "IdentityRefusedError"
    assert "identity preflight refused: nothing was submitted (refused: candidate)" in message
    assert message.index("replay candidate:") < message.index("replay baseline:"), "the refused one first"

"""The replay job: a bounded replay of captured agent input, restored from a production savepoint.

Run by the submitter as a PyFlink program (``flink run -py <this file> --spec-json ...`` or the REST
PythonDriver with the same program args). Arguments: :class:`~airflow_flink_replay.core.replay_job_spec.ReplayJobSpec`
as ``--spec-json <json>`` or ``--spec-file <path>``; repeated, one program submits each variant as its own job
(the replay DAG's ``submit_replays``: one Python start on the JobManager for every variant).

What it builds (:func:`~airflow_flink_replay.flink.pipeline.apply_agent_job`, as production, different
upstream):

    KafkaSource over the capture topic (raw bytes), start → end offsets per partition (bounded, uid
      afr-replay-source) → production's event time + watermark strategy as its own operator (uid
      afr-replay-watermarks) → ingest (the job's deserializer) → key by the job's key selector
      → agent (pinned: uid or uid hash, max parallelism — the latter job-wide too)
      → the job's output serializer + ``_replay`` → with result topics (``spec.results``, the replay DAG's
      choice): keyed by the output's content digest, numbered (``_replay.output_id``, uid afr-replay-output-ids)
      → KafkaSink to the variant's output topic; without: FileSink ``<output_dir>/<variant>-*.jsonl``

The manifest is loaded through :mod:`~airflow_flink_replay.core.manifest_io` (plain path, ``file://`` or any
fsspec URI) and its digest verified: a manifest edited after it was sealed stops the job before it is built.
When the spec carries ``manifest_key_ref`` (``${env:NAME}`` / ``${file:/path}``, resolved here, inside Flink)
the manifest's HMAC signature is checked with that key too, so a digest recomputed by hand does not pass.
A spec naming production's action-state topic or job identifier as its own is refused before anything is
built (:meth:`~airflow_flink_replay.core.replay_job_spec.ReplayJobSpec.production_clashes`).
Event time (Kafka record timestamp or a JSONPath field) and the watermark strategy (max out-of-orderness,
idleness) are the manifest's, i.e. production's, unless the spec overrides them
(:meth:`~airflow_flink_replay.core.replay_job_spec.ReplayJobSpec.timing`). Each output's ``_replay`` holds
the variant, the record's event time (``event_time_ms``) and the watermark when it was written
(``watermark_ms``).

The agent runs with ``job-identifier`` = the fork namespace, ``kafkaActionStateTopic`` = the isolated topic,
and every governed resource — the agent's and the job definition's env-level ones — wrapped in a policy proxy that
audits to the variant's audit topic (``<audit_dir>`` without result topics); the resources the candidate
changed (``spec.changed_resources``, from the agent check) are never served production's cassette. The job
definition (``agent_job``; or the older ``agent_factory``, adapted by
:meth:`~airflow_flink_replay.flink.agent_job.AgentJob.from_factory`) is imported under a content-hashed module
name (see :mod:`airflow_flink_replay.flink.agent_build`); its memory binding gets the spec's ``mem0_config``. The job
finishes by itself when every partition reached its end offset. Submit with allowNonRestoredState: the only
state dropped is production's source.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec, ReplayTiming, ReplayWindow
from airflow_flink_replay.core.replay_plans import IdentityCheck
from airflow_flink_replay.exceptions import FlinkReplayError, IdentityRefusedError

REPLAY_SOURCE_UID = "afr-replay-source"
REPLAY_WATERMARK_UID = "afr-replay-watermarks"


def replay_source(env: Any, spec: ReplayJobSpec, window: ReplayWindow, timing: ReplayTiming) -> Any:
    """The bounded capture source (uid ``afr-replay-source``) and, when ``timing`` needs one, production's
    event time + watermark strategy as its own operator (uid ``afr-replay-watermarks``)."""
    from pyflink.common import WatermarkStrategy

    from airflow_flink_replay.flink.event_time import needs_operator, watermark_strategy_for
    from airflow_flink_replay.flink.kafka import bounded_source

    source = bounded_source(
        spec.kafka_bootstrap,
        window.topic,
        window.start_offsets,
        window.end_offsets,
        group_id=f"afr-replay-{spec.job_identifier}-{spec.variant}",
        value="bytes",  # the bytes production received, unchanged: the job's deserializer gets them
        properties=spec.kafka_security.java_properties() if spec.kafka_security else None,  # resolved here
    )
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "replay-capture-source").uid(REPLAY_SOURCE_UID)
    if needs_operator(timing):
        stream = stream.assign_timestamps_and_watermarks(watermark_strategy_for(timing)).uid(REPLAY_WATERMARK_UID)
    return stream


def file_sink(output_dir: str, variant: str) -> Any:
    """Row-format FileSink writing ``<output_dir>/<variant>-<uuid>-<n>.jsonl`` (committed on checkpoints)."""
    from pyflink.common.serialization import Encoder
    from pyflink.datastream.connectors.file_system import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy

    Path(output_dir).mkdir(parents=True, exist_ok=True)
    return (
        FileSink.for_row_format(str(Path(output_dir).resolve()), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(
            OutputFileConfig.builder().with_part_prefix(variant).with_part_suffix(".jsonl").build()
        )
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )


def output_numbering() -> Any:
    """The KeyedProcessFunction, keyed by :func:`~airflow_flink_replay.core.results.output_digest`, that gives each
    output its id, ``_replay.output_id = "<digest>:<n>"``, ``n`` counted per digest in keyed state. A restart
    restores the count with the checkpoint, so an output the at-least-once sink sends again carries the id it had
    and is dropped when Airflow reads the topic back (:class:`~airflow_flink_replay.core.results.ResultReader`).
    Built here, inside Flink: PyFlink is imported only there."""
    from pyflink.common import Types
    from pyflink.datastream.functions import KeyedProcessFunction
    from pyflink.datastream.state import ValueStateDescriptor

    from airflow_flink_replay.core.results import with_output_id

    class _Number(KeyedProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("afr-output-count", Types.LONG()))

        def process_element(self, value: str, ctx: Any):  # type: ignore[override]
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield with_output_id(value, ctx.get_current_key(), n)

    return _Number()


def digest_of_output(text: str) -> str:
    """The key outputs are numbered by: the digest of the output JSON ``text``'s content."""
    from airflow_flink_replay.core.results import output_digest

    return output_digest(json.loads(text))


def results_sink(out: Any, spec: ReplayJobSpec) -> None:
    """The outputs to the spec's output topic, each with its id (at-least-once: ids make a re-send
    detectable), or to the ``output_dir`` FileSink without result topics."""
    if spec.results is None:
        out.sink_to(file_sink(spec.output_dir, spec.variant)).uid("afr-replay-sink").name("replay-output")
        return
    from pyflink.common import Types

    from airflow_flink_replay.flink.kafka import string_sink

    numbered = (
        out.key_by(digest_of_output, key_type=Types.STRING())
        .process(output_numbering(), output_type=Types.STRING())
        .uid("afr-replay-output-ids")
        .name("output-ids")
    )
    properties = spec.kafka_security.java_properties() if spec.kafka_security else None  # resolved here
    sink = string_sink(spec.kafka_bootstrap, spec.results.outputs, properties)
    numbered.sink_to(sink).uid("afr-replay-sink").name("replay-output")


def refuse_production_targets(spec: ReplayJobSpec) -> None:
    """Stop before anything is built when the spec's action-state topic or job identifier is production's.

    The spec's validator refuses this when it is parsed; checked again here because a spec can reach this
    point without validation (``model_construct``, a copy with ``model_copy(update=…)``).
    """
    problems = spec.production_clashes()
    if problems:
        raise FlinkReplayError("replay job refuses to start: " + "; ".join(problems))
    if not (spec.production_action_state_topic and spec.production_job_identifier):
        logging.warning(
            "replay %s: production's action-state topic / job identifier are not in the spec; the check that "
            "this replay does not use them could not run",
            spec.variant,
        )


def load_replay_job(spec: ReplayJobSpec, build_root: Path) -> tuple[Any, str]:
    """The spec's job definition (``agent_job``), or its ``agent_factory`` adapted to one, imported from a
    content-hashed copy of its package when ``isolate_agent_build``; returns it and the module it came from."""
    from airflow_flink_replay.flink.agent_build import load_agent_factory, load_job_definition
    from airflow_flink_replay.flink.agent_job import AgentJob

    if spec.agent_job:
        built = load_job_definition(spec.agent_job, isolate=spec.isolate_agent_build, build_root=build_root)
        return built.job, built.module
    assert spec.agent_factory is not None  # ReplayJobSpec._one_agent
    build = load_agent_factory(spec.agent_factory, isolate=spec.isolate_agent_build, build_root=build_root)
    job = AgentJob.from_factory(
        build.factory,
        key_field=spec.key_field,
        mem0_config=spec.mem0_config,
        agent_options=spec.agent_options,
        ref=spec.agent_factory,
    )
    return job, build.module


def guard_config(spec: ReplayJobSpec, runtime_pkg: str) -> dict[str, str]:
    """The agent config entry that arms the unmediated-call guard for this variant's tasks (none when the
    resources are not mediated: that run reproduces production's exact actions)."""
    if not spec.mediate_resources:
        return {}
    guard = importlib.import_module(f"{runtime_pkg}.flink.unmediated")
    decision = str(spec.policy.unmediated or "record")
    return {guard.GUARD_CONFIG_KEY: guard.guard_entry(spec.variant, spec.audit_target(), decision)}


def build_replay(env: Any, spec: ReplayJobSpec) -> Any:
    """Add the replay pipeline for ``spec`` to ``env``; returns the output stream."""
    refuse_production_targets(spec)  # first: before PyFlink, the agent's code or the manifest is touched
    from airflow_flink_replay.flink.agent_build import build_folder, isolate_runtime
    from airflow_flink_replay.flink.agent_job import audit_key_source
    from airflow_flink_replay.flink.agent_pin import AgentPin
    from airflow_flink_replay.flink.kafka import add_connector_jars
    from airflow_flink_replay.flink.pipeline import AgentRuntimeConfig, apply_agent_job

    replay_input = spec.replay_input()  # the manifest, if any, is verified here: a tampered one stops the job
    window, timing = replay_input.window, replay_input.timing
    logging.info(
        "replay %s: window %s (%d records), manifest %s (%s), timing %s",
        spec.variant,
        window.model_dump(),
        window.record_count,
        replay_input.manifest_digest,
        "signature checked" if spec.manifest_key_ref else "digest only",
        timing.model_dump(mode="json"),
    )
    add_connector_jars(env, spec.connector_jars)  # BEFORE the agents environment
    env.set_parallelism(spec.parallelism)
    if spec.max_parallelism:
        # Job-wide, not only on the agent: Flink checks the max parallelism of EVERY operator it maps to savepoint
        # state (also stateless ones such as afr-ingest), and a cluster-wide pipeline.max-parallelism would
        # otherwise make them explicit with another value ("Max parallelism mismatch ... afr-ingest").
        env.set_max_parallelism(spec.max_parallelism)
    env.enable_checkpointing(spec.checkpoint_interval_ms)

    build_root = build_folder(f"afr-build-{spec.variant}-")
    job, module = load_replay_job(spec, build_root)
    runtime_pkg = isolate_runtime(build_root)
    env.add_python_file(str(build_root))
    proxies = importlib.import_module(f"{runtime_pkg}.flink.proxies")
    policy_cls = importlib.import_module(f"{runtime_pkg}.core.policy").ReplayPolicy
    logging.info("replay %s: agent %s from %s", spec.variant, spec.agent_ref, module)

    def plan_hook(plan: Any, stage: Any) -> None:
        key_field, key_selector = audit_key_source(stage.job, spec.key_field)  # audit keys: as production's cassette
        policy = policy_cls.model_validate_json(spec.policy.model_dump_json())
        if stage.job.memory is not None:  # the memory binding writes to this replay's own fork
            policy = policy.with_memory(stage.job.memory.resource_name)
        if spec.changed_resources:  # the candidate's changed resources: never served production's cassette
            policy = policy.with_changed(spec.changed_resources)
            logging.info("replay %s: changed resources, never replayed: %s", spec.variant, spec.changed_resources)
        report = proxies.rewrite_plan_resources(
            plan,
            policy,
            spec.variant,
            spec.audit_target(),
            key_field,
            namespace=spec.job_identifier,
            cassette=spec.cassette_json(),
            key_selector=key_selector,
            stage=stage.name if getattr(job, "is_pipeline", False) else "",  # audit records name a pipeline's stage
        )
        logging.info("replay %s: resources of stage %s: %s", spec.variant, stage.name, report)

    out = apply_agent_job(
        env,
        replay_source(env, spec, window, timing),
        job,
        runtime=AgentRuntimeConfig(
            bootstrap=spec.kafka_bootstrap,
            action_state_topic=spec.action_state_topic,
            job_identifier=spec.job_identifier,
            action_state_partitions=spec.action_state_partitions,
            extra={**spec.agent_config, **guard_config(spec, runtime_pkg)},
        ),
        pin=AgentPin(uid=spec.agent_uid, uid_hash=spec.agent_uid_hash, max_parallelism=spec.max_parallelism),
        plan_hook=plan_hook if spec.mediate_resources else None,
        mem0_config=spec.mem0_config,
        output_extra={"_replay": {"variant": spec.variant, "partition": None, "offset": None}},
        output_timing_key="_replay",
        stage_outputs=True,
    )
    results_sink(out, spec)
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse the spec(s), build, execute.

    One spec: ``execute`` (blocks until the bounded job finishes when the client is attached). Several specs
    (``--spec-json`` repeated, one per variant): every job is built first — a variant that cannot be built
    stops the program before any is submitted — then each is submitted as its own Flink job
    (``execute_async``, a fresh environment each), so one Python start on the JobManager submits them all.

    Given production's plan (:class:`~airflow_flink_replay.core.replay_plans.IdentityCheck` arguments), every
    variant's job graph is checked against it first and one that does not map stops the program with every
    variant's report, before any job is submitted: the identity preflight and the submission in one run."""
    from airflow_flink_replay.flink.environment import job_environment

    args = list(sys.argv[1:] if argv is None else argv)
    specs = ReplayJobSpec.all_from_argv(args)
    check = IdentityCheck.from_argv(args)
    built = []
    for spec in specs:
        env = job_environment()
        build_replay(env, spec)
        built.append((env, spec.job_name or f"afr-replay-{spec.variant}"))
    if check is not None:
        submit_checked(built, specs, check)
    elif len(built) == 1:
        env, name = built[0]
        env.execute(name)
        return
    else:
        for env, name in built:
            client = env.execute_async(name)
            logging.info("replay job %s submitted as %s", name, client.get_job_id())
    exit_after_submitting()


def submit_checked(built: list[tuple[Any, str]], specs: list[ReplayJobSpec], check: IdentityCheck) -> None:
    """Check every built job's graph against production's plan, then submit each (nothing when one refuses)."""
    from airflow_flink_replay.flink.replay_plans import stream_graph_plan

    graphs = [env._generate_stream_graph(clear_transformations=True, job_name=name) for env, name in built]
    reports = check.reports([(spec, stream_graph_plan(graph)) for spec, graph in zip(specs, graphs, strict=True)])
    refusal = IdentityCheck.refusal(reports)
    if refusal:
        raise IdentityRefusedError(refusal)
    for (env, name), graph in zip(built, graphs, strict=True):
        client = env._j_stream_execution_environment.executeAsync(graph)
        logging.info("replay job %s (identity preflight: maps) submitted as %s", name, client.getJobID().toString())


def exit_after_submitting() -> None:
    """End the program as soon as its jobs are submitted.

    The JobManager answers the submission only when the program's Python has exited, and the interpreter's
    own shutdown (PyFlink, Beam and the agent's modules torn down one by one) took ~2.5 s of the replay
    submission on the local stack. Nothing is left to do: the jobs run on their own, the build folders are
    removed here, the log is flushed."""
    from airflow_flink_replay.flink.agent_build import remove_build_folders

    remove_build_folders()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def describe(spec_json: str) -> str:
    """Human summary of a spec (for logs)."""
    spec = ReplayJobSpec.model_validate_json(spec_json)
    replay_input = spec.replay_input()
    return json.dumps(
        {
            "variant": spec.variant,
            "window": replay_input.window.model_dump(),
            "timing": replay_input.timing.model_dump(mode="json"),
        },
        default=str,
    )


if __name__ == "__main__":
    main()

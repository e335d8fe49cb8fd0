"""Step 6 of the replay chain: a fresh action-state topic per replay variant, and its cleanup.

Flink Agents' durable action-state store records every LLM/tool result keyed by (key, sequence number,
input attributes, action) — not by prompt. A candidate restored from production's savepoint and pointed at
production's topic replays production's recorded answers (its new code never runs) and writes into
production's topic. :class:`IsolateActionStateOperator` gives every variant a fresh, empty, compacted
topic with production's partition count; the replay job's ``kafkaActionStateTopic`` points at it.
:class:`DeleteReplayTopicsOperator` removes them afterwards (``trigger_rule=all_done``).

Both record production's action-state topic end offsets (before / after) as evidence that the replay did
not write there. Production may keep writing meanwhile (it was resumed), so a moved offset is not proof
of a leak by itself: the report shows both numbers and says so.

The Kafka work (admin futures, the checks against the broker, undoing a partial creation) is
:class:`~airflow_flink_replay.hooks.kafka_topics.KafkaTopicsHook`'s: each ``execute`` is one hook call
that returns the typed XCom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_flink_replay.core.replay_spec import is_legal_topic_name, replay_topic_name, variant_names
from airflow_flink_replay.exceptions import ActionStateIsolationError
from airflow_flink_replay.hooks.kafka_topics import ActionStateCleanup, ActionStateIsolation, KafkaTopicsHook

__all__ = [
    "ActionStateCleanup",
    "ActionStateIsolation",
    "DeleteReplayTopicsOperator",
    "IsolateActionStateOperator",
    "replay_topic_name",
]


class IsolateActionStateOperator(BaseOperator):
    """Create a fresh, empty, compacted action-state topic for each replay variant.

    Refuses (before creating anything) when a name equals production's topic, two variants share a
    name, or a topic already holds data. An existing *empty* topic with the right partition count is
    reused (a retry of this task). Topics created here are deleted again if a later one fails.

    :param production_topic: production's ``kafkaActionStateTopic`` (templated).
    :param variants: replay variants (the DAG passes ``ReplaySpec.variant_names()``); default a default spec's,
        ``["baseline", "baseline_2", "candidate"]``.
    :param topics: explicit ``{variant: topic}`` names (templated); default ``replay_topic_name(...)``.
    :param run_key: part of the default names (templated; default: the Airflow run id).
    :param partitions: partition count; default production's (required when production's topic does not
        exist yet — Flink Agents' ``kafkaActionStateTopicNumPartitions``, default 64).
    :param replication_factor: for the new topics.
    :param topic_config: topic configuration; ``cleanup.policy=compact`` unless overridden.
    :param kafka_config_id: the Kafka connection.
    :param manifest_uri: when given (templated), the topics are also recorded in the manifest's isolation
        section (``production_action_state_topic``, ``action_state_topics``) and the manifest re-sealed.
    :param signing_conn_id: the manifest signing connection (its password is the key): the manifest's signature
        is checked, then the manifest signed again (the signature covers the isolation section).
    :param result_topics: ``{variant: {"outputs": topic, "audit": topic}}`` (templated): each variant's result
        topics, created empty with them (one partition, ``cleanup.policy=delete``; refused when one holds data).
    """

    template_fields: Sequence[str] = ("production_topic", "topics", "run_key", "manifest_uri", "result_topics")

    def __init__(
        self,
        *,
        production_topic: str,
        variants: Sequence[str] | None = None,
        topics: Mapping[str, str] | None = None,
        run_key: str | None = None,
        partitions: int | None = None,
        replication_factor: int = 1,
        topic_config: Mapping[str, str] | None = None,
        kafka_config_id: str = "kafka_default",
        manifest_uri: str | None = None,
        result_topics: Mapping[str, Mapping[str, str]] | None = None,
        signing_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.signing_conn_id = signing_conn_id
        self.manifest_uri = manifest_uri
        self.result_topics = result_topics
        self.production_topic = production_topic
        self.variants = list(variants) if variants is not None else variant_names()
        self.topics = topics
        self.run_key = run_key
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.topic_config = {"cleanup.policy": "compact", **(topic_config or {})}
        self.kafka_config_id = kafka_config_id

    def plan_topics(self, run_key: str) -> dict[str, str]:
        """The ``{variant: topic}`` names, checked against production's and each other."""
        names = (
            dict(self.topics)
            if self.topics
            else {v: replay_topic_name(self.production_topic, run_key, v) for v in self.variants}
        )
        for variant, name in names.items():
            if name == self.production_topic:
                raise AirflowException(
                    f"refusing to use production's action-state topic {name!r} for replay variant {variant!r}: "
                    "the replay would reuse production's recorded LLM/tool results and write into production's "
                    "topic. Fix: give the variant its own topic (leave topics= unset for generated names)"
                )
            if not is_legal_topic_name(name):
                raise AirflowException(
                    f"{name!r} (variant {variant!r}) is not a legal Kafka topic name. Fix: use at most 249 of "
                    "[a-zA-Z0-9._-]"
                )
        if len(set(names.values())) != len(names):
            raise AirflowException(f"two variants share one action-state topic: {names}. Fix: one topic each")
        return names

    @cached_property
    def hook(self) -> KafkaTopicsHook:
        """The Kafka topics hook (closing it only drops its reading consumer)."""
        return KafkaTopicsHook(kafka_config_id=self.kafka_config_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Check, create, and return :class:`ActionStateIsolation` as JSON."""
        run_key = self.run_key or str(context.get("run_id") or "manual")
        names = self.plan_topics(run_key)
        try:
            result = self.hook.isolate_action_state(
                self.production_topic,
                names,
                partitions=self.partitions,
                replication_factor=self.replication_factor,
                config=self.topic_config,
                result_topics=self.result_topics,
            )
        except ActionStateIsolationError as err:
            raise AirflowException(str(err)) from err
        self.log.info("action-state topics per variant (%s partitions, compacted): %s", result.partitions, names)
        if result.result_topics:
            self.log.info("result topics per variant (1 partition): %s", result.result_topics)
        if self.manifest_uri:
            self._record_in_manifest(str(self.manifest_uri), names)
        return result.model_dump(mode="json")

    def _record_in_manifest(self, manifest_uri: str, names: dict[str, str]) -> None:
        """Record production's action-state topic and the replays' in the run's manifest ``manifest_uri`` (sealed
        again, signed with ``signing_conn_id``)."""
        from airflow_flink_replay.core.manifest import ManifestError
        from airflow_flink_replay.core.manifest_io import record_isolation
        from airflow_flink_replay.operators.manifest import signing_key
        from airflow_flink_replay.run_io import run_storage

        try:
            sealed = record_isolation(
                run_storage.location(manifest_uri), signing_key=signing_key(self.signing_conn_id),
                production_action_state_topic=self.production_topic, action_state_topics=names,
            )  # fmt: skip
        except ManifestError as err:
            raise AirflowException(f"cannot record the topics in the manifest {manifest_uri}: {err}") from err
        self.log.info("recorded in manifest %s (digest %s)", manifest_uri, sealed.digest)


class DeleteReplayTopicsOperator(BaseOperator):
    """Delete the replay's action-state topics; record production's end offsets after the replay.

    Runs with ``trigger_rule=all_done`` by default (cleanup also after failures). Never deletes the
    production topic, whatever it is given.

    :param isolation: :class:`IsolateActionStateOperator`'s XCom (templated), or None with ``topics``.
    :param topics: topics to delete (templated), in addition to those in ``isolation``.
    :param production_topic: production's action-state topic (default: from ``isolation``).
    :param kafka_config_id: the Kafka connection.
    """

    template_fields: Sequence[str] = ("isolation", "topics", "production_topic")

    def __init__(
        self,
        *,
        isolation: Mapping[str, Any] | None = None,
        topics: Sequence[str] | None = None,
        production_topic: str | None = None,
        kafka_config_id: str = "kafka_default",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.isolation = isolation
        self.topics = topics
        self.production_topic = production_topic
        self.kafka_config_id = kafka_config_id

    @cached_property
    def hook(self) -> KafkaTopicsHook:
        """The Kafka topics hook (closing it only drops its reading consumer)."""
        return KafkaTopicsHook(kafka_config_id=self.kafka_config_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Delete and return :class:`ActionStateCleanup` as JSON."""
        iso = dict(self.isolation or {})
        topics = list(dict.fromkeys([*(iso.get("topics") or {}).values(), *(self.topics or [])]))
        try:
            result = self.hook.delete_replay_topics(
                topics,
                production_topic=self.production_topic or iso.get("production_topic"),
                production_end_offsets_before=iso.get("production_end_offsets_before"),
            )
        except ActionStateIsolationError as err:
            raise AirflowException(str(err)) from err
        self.log.info("deleted replay topics %s (missing: %s). %s", result.deleted, result.missing, result.note)
        return result.model_dump(mode="json")

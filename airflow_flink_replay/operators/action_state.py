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
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException
from confluent_kafka.admin import NewTopic
from pydantic import BaseModel, Field

from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook

_LEGAL = re.compile(r"[^a-zA-Z0-9._-]")
_MAX_TOPIC = 249


class ActionStateIsolation(BaseModel):
    """XCom of :class:`IsolateActionStateOperator`."""

    production_topic: str
    partitions: int
    topics: dict[str, str] = Field(description="variant -> fresh action-state topic")
    created: list[str] = Field(description="topics this task created (the others existed empty: a retry)")
    production_end_offsets_before: dict[int, int]
    recorded_at: datetime


class ActionStateCleanup(BaseModel):
    """XCom of :class:`DeleteReplayTopicsOperator`: what was deleted and the production evidence."""

    deleted: list[str]
    missing: list[str]
    replay_topic_end_offsets: dict[str, dict[int, int]] = Field(description="what each replay topic held")
    production_topic: str | None = None
    production_end_offsets_before: dict[int, int] | None = None
    production_end_offsets_after: dict[int, int] | None = None
    production_records_written_meanwhile: int | None = None
    note: str = ""


def replay_topic_name(production_topic: str, run_key: str, variant: str) -> str:
    """``<production>-replay-<run>-<variant>``, made legal for Kafka and at most 249 characters."""
    name = _LEGAL.sub("-", f"{production_topic}-replay-{run_key}-{variant}")
    if len(name) > _MAX_TOPIC:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[: _MAX_TOPIC - 13]}-{digest}"
    return name


class IsolateActionStateOperator(BaseOperator):
    """Create a fresh, empty, compacted action-state topic for each replay variant.

    Refuses (before creating anything) when a name equals production's topic, two variants share a
    name, or a topic already holds data. An existing *empty* topic with the right partition count is
    reused (a retry of this task). Topics created here are deleted again if a later one fails.

    :param production_topic: production's ``kafkaActionStateTopic`` (templated).
    :param variants: replay variants, e.g. ``["baseline", "baseline-2", "candidate"]``.
    :param topics: explicit ``{variant: topic}`` names (templated); default ``replay_topic_name(...)``.
    :param run_key: part of the default names (templated; default: the Airflow run id).
    :param partitions: partition count; default production's (required when production's topic does not
        exist yet — Flink Agents' ``kafkaActionStateTopicNumPartitions``, default 64).
    :param replication_factor: for the new topics.
    :param topic_config: topic configuration; ``cleanup.policy=compact`` unless overridden.
    :param kafka_config_id: the Kafka connection.
    :param manifest_uri: when given (templated), the topics are also recorded in the manifest's isolation
        section (``production_action_state_topic``, ``action_state_topics``) and the manifest re-sealed.
    """

    template_fields: Sequence[str] = ("production_topic", "topics", "run_key", "manifest_uri")

    def __init__(
        self,
        *,
        production_topic: str,
        variants: Sequence[str] = ("baseline", "baseline-2", "candidate"),
        topics: Mapping[str, str] | None = None,
        run_key: str | None = None,
        partitions: int | None = None,
        replication_factor: int = 1,
        topic_config: Mapping[str, str] | None = None,
        kafka_config_id: str = "kafka_default",
        manifest_uri: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.manifest_uri = manifest_uri
        self.production_topic = production_topic
        self.variants = list(variants)
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
            if not name or _LEGAL.search(name) or len(name) > _MAX_TOPIC:
                raise AirflowException(
                    f"{name!r} (variant {variant!r}) is not a legal Kafka topic name. Fix: use at most 249 of "
                    "[a-zA-Z0-9._-]"
                )
        if len(set(names.values())) != len(names):
            raise AirflowException(f"two variants share one action-state topic: {names}. Fix: one topic each")
        return names

    @cached_property
    def hook(self) -> KafkaOffsetsHook:
        """The Kafka offsets/admin hook (closing it only drops its reading consumer)."""
        return KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Check, create, and return :class:`ActionStateIsolation` as JSON."""
        run_key = self.run_key or str(context.get("run_id") or "manual")
        names = self.plan_topics(run_key)
        hook = self.hook
        created: list[str] = []
        try:
            prod_exists = hook.topic_exists(self.production_topic)
            if prod_exists:
                prod_partitions = len(hook.partitions(self.production_topic))
                before = hook.end_offsets(self.production_topic)
            elif self.partitions is None:
                raise AirflowException(
                    f"production's action-state topic {self.production_topic!r} does not exist, so its partition "
                    "count is unknown. Fix: check the name (kafkaActionStateTopic) or pass partitions="
                )
            else:
                prod_partitions, before = self.partitions, {}
            partitions = self.partitions or prod_partitions
            if prod_exists and partitions != prod_partitions:
                self.log.warning("partitions=%s differs from production's %s", partitions, prod_partitions)
            to_create = []
            for variant, topic in names.items():
                if hook.topic_exists(topic):
                    if hook.has_data(topic):
                        raise AirflowException(
                            f"action-state topic {topic!r} for variant {variant!r} already has data "
                            f"({hook.end_offsets(topic)}): a replay must start with no recorded actions. "
                            "Fix: delete it (DeleteReplayTopicsOperator) or use another run key"
                        )
                    existing = len(hook.partitions(topic))
                    if existing != partitions:
                        raise AirflowException(
                            f"existing empty topic {topic!r} has {existing} partitions, production has {partitions}. "
                            "Fix: delete it and let this task create it"
                        )
                    self.log.info("reusing existing empty topic %s (variant %s)", topic, variant)
                else:
                    to_create.append(topic)
            if to_create:
                futures = hook.admin.create_topics(
                    [
                        NewTopic(
                            t,
                            num_partitions=partitions,
                            replication_factor=self.replication_factor,
                            config=dict(self.topic_config),
                        )
                        for t in to_create
                    ],
                    request_timeout=hook.timeout,
                )
                errors = []
                for topic, future in futures.items():
                    try:
                        future.result()
                        created.append(topic)
                    except Exception as err:
                        errors.append(f"{topic}: {err}")
                if errors:
                    raise AirflowException(f"could not create action-state topics: {'; '.join(errors)}")
            result = ActionStateIsolation(
                production_topic=self.production_topic,
                partitions=partitions,
                topics=names,
                created=created,
                production_end_offsets_before=before,
                recorded_at=datetime.now(UTC),
            )
        except BaseException:
            if created:
                self.log.warning("deleting the topics created before the failure: %s", created)
                _delete(hook, created)
            raise
        finally:
            hook.close()
        self.log.info("action-state topics per variant (%s partitions, compacted): %s", partitions, names)
        if self.manifest_uri:
            from airflow_flink_replay.core.manifest import ManifestError
            from airflow_flink_replay.core.manifest_io import record_isolation

            try:
                sealed = record_isolation(
                    self.manifest_uri, production_action_state_topic=self.production_topic, action_state_topics=names
                )
            except ManifestError as err:
                raise AirflowException(f"cannot record the topics in the manifest {self.manifest_uri}: {err}") from err
            self.log.info("recorded in manifest %s (digest %s)", self.manifest_uri, sealed.digest)
        return result.model_dump(mode="json")


def _delete(hook: KafkaOffsetsHook, topics: Sequence[str]) -> tuple[list[str], list[str]]:
    existing = [t for t in topics if hook.topic_exists(t)]
    missing = [t for t in topics if t not in existing]
    if existing:
        for _topic, future in hook.admin.delete_topics(existing, request_timeout=hook.timeout).items():
            future.result()
    return existing, missing


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
    def hook(self) -> KafkaOffsetsHook:
        """The Kafka offsets/admin hook (closing it only drops its reading consumer)."""
        return KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Delete and return :class:`ActionStateCleanup` as JSON."""
        iso = dict(self.isolation or {})
        production = self.production_topic or iso.get("production_topic")
        topics = list(dict.fromkeys([*(iso.get("topics") or {}).values(), *(self.topics or [])]))
        if production and production in topics:
            raise AirflowException(
                f"refusing to delete {production!r}: it is production's action-state topic. Fix: pass only the "
                "replay topics"
            )
        hook = self.hook
        try:
            held = {t: hook.end_offsets(t) for t in topics if hook.topic_exists(t)}
            after = hook.end_offsets(production) if production and hook.topic_exists(production) else None
            deleted, missing = _delete(hook, topics)
        finally:
            hook.close()
        before = {int(p): int(o) for p, o in (iso.get("production_end_offsets_before") or {}).items()} or None
        meanwhile = None
        note = ""
        if before is not None and after is not None:
            meanwhile = sum(after.get(p, 0) - o for p, o in before.items())
            note = f"production's action-state topic advanced by {meanwhile} record(s) during the replay" + (
                ": production was running and may have written them; the replay jobs were pointed at "
                f"{sorted(held) or topics} only"
                if meanwhile
                else ": nothing was written there"
            )
        result = ActionStateCleanup(
            deleted=deleted,
            missing=missing,
            replay_topic_end_offsets=held,
            production_topic=production,
            production_end_offsets_before=before,
            production_end_offsets_after=after,
            production_records_written_meanwhile=meanwhile,
            note=note,
        )
        self.log.info("deleted replay topics %s (missing: %s). %s", deleted, missing, note)
        return result.model_dump(mode="json")

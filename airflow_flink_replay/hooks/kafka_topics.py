"""Creating and deleting Kafka topics, and the replay's action-state topics built on that.

:class:`KafkaTopicsHook` extends :class:`~airflow_flink_replay.hooks.kafka_offsets.KafkaOffsetsHook` (which
reaches the broker through the Kafka provider's ``KafkaAdminClientHook``) with the admin work the replay
chain does by itself:

- :meth:`KafkaTopicsHook.create_topics` / :meth:`KafkaTopicsHook.delete_topics` wait on the admin client's
  futures, like the provider's ``create_topic`` / ``delete_topic``; unlike those they pass a topic
  configuration (``cleanup.policy=compact``), never take an existing topic for a created one, and undo a
  partial creation;
- :meth:`KafkaTopicsHook.isolate_action_state` and :meth:`KafkaTopicsHook.delete_replay_topics` are step 6
  of the chain and its cleanup (see :mod:`airflow_flink_replay.operators.action_state`): the operators call
  one of them and push the typed result.

Refusals raise :class:`~airflow_flink_replay.exceptions.ActionStateIsolationError` with the cause and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from confluent_kafka.admin import NewTopic
from pydantic import BaseModel, Field

from airflow_flink_replay.exceptions import ActionStateIsolationError
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook


class ActionStateIsolation(BaseModel):
    """XCom of :class:`~airflow_flink_replay.operators.action_state.IsolateActionStateOperator`."""

    production_topic: str
    partitions: int
    topics: dict[str, str] = Field(description="variant -> fresh action-state topic")
    created: list[str] = Field(description="topics this task created (the others existed empty: a retry)")
    production_end_offsets_before: dict[int, int]
    recorded_at: datetime
    result_topics: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="variant -> its fresh result topics ({'outputs': ..., 'audit': ...})"
    )


class ActionStateCleanup(BaseModel):
    """XCom of :class:`~airflow_flink_replay.operators.action_state.DeleteReplayTopicsOperator`: what was
    deleted and the production evidence."""

    deleted: list[str]
    missing: list[str]
    replay_topic_end_offsets: dict[str, dict[int, int]] = Field(description="what each replay topic held")
    production_topic: str | None = None
    production_end_offsets_before: dict[int, int] | None = None
    production_end_offsets_after: dict[int, int] | None = None
    production_records_written_meanwhile: int | None = None
    note: str = ""


class KafkaTopicsHook(KafkaOffsetsHook):
    """Create and delete topics; isolate the replay's action state (connection type ``kafka``).

    :param kafka_config_id: the Kafka connection (extra = confluent-kafka config with ``bootstrap.servers``).
    :param timeout: seconds for each metadata / offsets / admin request.
    """

    # -- topics ------------------------------------------------------------------------------------
    def create_topics(
        self,
        topics: Sequence[str],
        *,
        partitions: int,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Create ``topics`` (all or none) and return them.

        Waits on every future. When one fails, the ones created are deleted again and
        :class:`ActionStateIsolationError` names every failure.
        """
        if not topics:
            return []
        futures = self.admin.create_topics(
            [
                NewTopic(t, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {}))
                for t in topics
            ],
            request_timeout=self.timeout,
        )
        created: list[str] = []
        errors = []
        try:
            for topic, future in futures.items():
                try:
                    future.result()
                    created.append(topic)
                except Exception as err:
                    errors.append(f"{topic}: {err}")
            if errors:
                raise ActionStateIsolationError(f"could not create replay topics: {'; '.join(errors)}")
        except BaseException:
            if created:
                self.log.warning("deleting the topics created before the failure: %s", created)
                self.delete_topics(created)
            raise
        return created

    def delete_topics(self, topics: Sequence[str]) -> tuple[list[str], list[str]]:
        """Delete the topics that exist; return ``(deleted, missing)``."""
        existing = [t for t in topics if self.topic_exists(t)]
        missing = [t for t in topics if t not in existing]
        if existing:
            for _topic, future in self.admin.delete_topics(existing, request_timeout=self.timeout).items():
                future.result()
        return existing, missing

    # -- action state (step 6 and its cleanup) -----------------------------------------------------
    def _replay_partitions(self, production_topic: str, partitions: int | None) -> tuple[int, dict[int, int]]:
        """The replay topics' partition count and production's end offsets now (``{}`` when it is missing)."""
        if self.topic_exists(production_topic):
            prod_partitions = len(self.partitions(production_topic))
            before = self.end_offsets(production_topic)
            if partitions is not None and partitions != prod_partitions:
                self.log.warning("partitions=%s differs from production's %s", partitions, prod_partitions)
            return partitions or prod_partitions, before
        if partitions is None:
            raise ActionStateIsolationError(
                f"production's action-state topic {production_topic!r} does not exist, so its partition "
                "count is unknown. Fix: check the name (kafkaActionStateTopic) or pass partitions="
            )
        return partitions, {}

    def _to_create(self, topics: Mapping[str, str], partitions: int, what: str = "action-state") -> list[str]:
        """The topics to create; an existing one must be empty with ``partitions`` partitions (a retry)."""
        to_create = []
        for variant, topic in topics.items():
            if not self.topic_exists(topic):
                to_create.append(topic)
                continue
            if self.has_data(topic):
                held = "recorded actions" if what == "action-state" else "results of an earlier replay"
                raise ActionStateIsolationError(
                    f"{what} topic {topic!r} for variant {variant!r} already has data "
                    f"({self.end_offsets(topic)}): a replay must start with no {held}. "
                    "Fix: delete it (DeleteReplayTopicsOperator) or use another run key"
                )
            existing = len(self.partitions(topic))
            if existing != partitions:
                raise ActionStateIsolationError(
                    f"existing empty topic {topic!r} has {existing} partitions, production has {partitions}. "
                    "Fix: delete it and let this task create it"
                )
            self.log.info("reusing existing empty topic %s (variant %s)", topic, variant)
        return to_create

    def isolate_action_state(
        self,
        production_topic: str,
        topics: Mapping[str, str],
        *,
        partitions: int | None = None,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        result_topics: Mapping[str, Mapping[str, str]] | None = None,
    ) -> ActionStateIsolation:
        """Give every variant of ``topics`` (``{variant: topic}``) a fresh, empty topic, and of ``result_topics``
        (``{variant: {"outputs": topic, "audit": topic}}``) its fresh result topics.

        Partitions default to production's; production's end offsets are recorded as the "before" evidence.
        Refuses, before creating anything, a topic that holds data or an empty one with another partition
        count; an existing empty one is reused (a retry). Result topics have one partition and
        ``cleanup.policy=delete``. Closes the reading consumer afterwards.
        """
        results = {f"{v}.{kind}": t for v, kinds in (result_topics or {}).items() for kind, t in kinds.items()}
        taken = sorted(set(results.values()) & {production_topic, *topics.values()})
        if taken:
            raise ActionStateIsolationError(
                f"result topics {taken} are action-state topics (production's or a replay's). Fix: name them apart"
            )
        try:
            count, before = self._replay_partitions(production_topic, partitions)
            new_state = self._to_create(topics, count)
            new_results = self._to_create(results, 1, "result")
            created = self.create_topics(
                new_state, partitions=count, replication_factor=replication_factor, config=config
            )
            try:
                created += self.create_topics(
                    new_results, partitions=1, replication_factor=replication_factor,
                    config={"cleanup.policy": "delete"},
                )  # fmt: skip
            except BaseException:
                if created:
                    self.delete_topics(created)
                raise
        finally:
            self.close()
        return ActionStateIsolation(
            production_topic=production_topic,
            partitions=count,
            topics=dict(topics),
            created=created,
            production_end_offsets_before=before,
            recorded_at=datetime.now(UTC),
            result_topics={v: dict(kinds) for v, kinds in (result_topics or {}).items()},
        )

    def delete_replay_topics(
        self,
        topics: Sequence[str],
        *,
        production_topic: str | None = None,
        production_end_offsets_before: Mapping[Any, Any] | None = None,
    ) -> ActionStateCleanup:
        """Delete the replay's topics (never ``production_topic``) and compare production's end offsets.

        Records what each replay topic held and production's end offsets now; with the offsets recorded
        before the replay, the note says how far production's topic moved meanwhile (production may have
        written those records itself: it was running). Closes the reading consumer afterwards.
        """
        if production_topic and production_topic in topics:
            raise ActionStateIsolationError(
                f"refusing to delete {production_topic!r}: it is production's action-state topic. Fix: pass only "
                "the replay topics"
            )
        try:
            held = {t: self.end_offsets(t) for t in topics if self.topic_exists(t)}
            after = (
                self.end_offsets(production_topic) if production_topic and self.topic_exists(production_topic) else None
            )
            deleted, missing = self.delete_topics(topics)
        finally:
            self.close()
        before = {int(p): int(o) for p, o in (production_end_offsets_before or {}).items()} or None
        meanwhile = None
        note = ""
        if before is not None and after is not None:
            meanwhile = sum(after.get(p, 0) - o for p, o in before.items())
            note = f"production's action-state topic advanced by {meanwhile} record(s) during the replay" + (
                ": production was running and may have written them; the replay jobs were pointed at "
                f"{sorted(held) or list(topics)} only"
                if meanwhile
                else ": nothing was written there"
            )
        return ActionStateCleanup(
            deleted=deleted,
            missing=missing,
            replay_topic_end_offsets=held,
            production_topic=production_topic,
            production_end_offsets_before=before,
            production_end_offsets_after=after,
            production_records_written_meanwhile=meanwhile,
            note=note,
        )

"""KafkaTopicsHook: topic creation is all-or-none, the action-state refusals, cleanup evidence; and the
action-state operators turn the hook's refusals into task failures.

The broker is an in-memory stand-in for the two things the hook talks to (the admin client and the reading
consumer's watermarks), so the failure paths a real broker rarely shows (one of three creations failing)
run here. The same behaviour on real tansu: tests/integration/test_action_state_isolation.py.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_flink_replay.exceptions import ActionStateIsolationError, FlinkReplayError
from airflow_flink_replay.hooks.kafka_topics import KafkaTopicsHook
from airflow_flink_replay.operators.action_state import DeleteReplayTopicsOperator, IsolateActionStateOperator


@dataclass
class _TopicMeta:
    partitions: dict[int, Any]
    error: Any = None


@dataclass
class FakeBroker:
    """Topics as ``{name: [records per partition]}``; ``fail`` names the topics whose creation fails."""

    topics: dict[str, list[int]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    fail: set[str] = field(default_factory=set)

    def list_topics(self, timeout: float) -> Any:
        topics = {t: _TopicMeta(dict.fromkeys(range(len(p)))) for t, p in self.topics.items()}
        return type("Meta", (), {"topics": topics})

    def create_topics(self, new_topics: list[Any], request_timeout: float) -> dict[str, Future[None]]:
        out: dict[str, Future[None]] = {}
        for nt in new_topics:
            fut: Future[None] = Future()
            if nt.topic in self.fail:
                fut.set_exception(RuntimeError("INVALID_REPLICATION_FACTOR"))
            else:
                self.topics[nt.topic] = [0] * nt.num_partitions
                self.configs[nt.topic] = dict(nt.config)
                fut.set_result(None)
            out[nt.topic] = fut
        return out

    def delete_topics(self, topics: list[str], request_timeout: float) -> dict[str, Future[None]]:
        out: dict[str, Future[None]] = {}
        for t in topics:
            del self.topics[t]
            out[t] = Future()
            out[t].set_result(None)
        return out

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return 0, self.topics[tp.topic][tp.partition]

    def close(self) -> None:
        pass


class FakeTopicsHook(KafkaTopicsHook):
    """The real hook with the broker swapped for :class:`FakeBroker`."""

    def __init__(self, broker: FakeBroker) -> None:
        super().__init__(kafka_config_id="kafka_default")
        self.broker = broker

    @property
    def admin(self) -> Any:
        return self.broker

    def _reader(self) -> Any:
        return self.broker


PROD = "prod-action-state"


def broker() -> FakeBroker:
    return FakeBroker(topics={PROD: [2, 1, 1]})


def test_isolate_creates_fresh_compacted_topics_with_productions_partitions() -> None:
    b = broker()
    topics = {"baseline": "rp-b", "candidate": "rp-c"}
    iso = FakeTopicsHook(b).isolate_action_state(PROD, topics, config={"cleanup.policy": "compact"})
    assert iso.topics == topics and sorted(iso.created) == ["rp-b", "rp-c"] and iso.partitions == 3
    assert iso.production_end_offsets_before == {0: 2, 1: 1, 2: 1}
    assert b.topics["rp-b"] == [0, 0, 0] and b.configs["rp-c"] == {"cleanup.policy": "compact"}


def test_isolate_creates_result_topics_with_one_partition_and_delete_policy() -> None:
    b = broker()
    results = {"baseline": {"outputs": "rp-b-outputs", "audit": "rp-b-audit"}}
    iso = FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b"}, config={"cleanup.policy": "compact"},
                                                 result_topics=results)
    assert sorted(iso.created) == ["rp-b", "rp-b-audit", "rp-b-outputs"] and iso.result_topics == results
    assert b.topics["rp-b-outputs"] == [0] and b.configs["rp-b-audit"] == {"cleanup.policy": "delete"}
    assert b.topics["rp-b"] == [0, 0, 0]  # the action-state topic keeps production's partitions
    # a retry reuses the empty ones; one holding results of an earlier replay is refused
    assert FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b"}, result_topics=results).created == []
    b.topics["rp-b-outputs"] = [4]
    with pytest.raises(ActionStateIsolationError, match=r"result topic 'rp-b-outputs'.*results of an earlier"):
        FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b"}, result_topics=results)


def test_a_result_topic_that_is_an_action_state_topic_is_refused_before_anything_is_created() -> None:
    b = broker()
    for taken in (PROD, "rp-b"):
        with pytest.raises(ActionStateIsolationError, match=rf"result topics \['{taken}'\] are action-state topics"):
            FakeTopicsHook(b).isolate_action_state(
                PROD, {"baseline": "rp-b"}, result_topics={"baseline": {"outputs": taken, "audit": "a"}}
            )
    assert set(b.topics) == {PROD}


def test_a_failed_creation_deletes_the_topics_created_before_it() -> None:
    b = broker()
    b.fail = {"rp-c"}
    with pytest.raises(ActionStateIsolationError, match=r"could not create replay topics: rp-c: .*REPLICATION"):
        FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b", "candidate": "rp-c"})
    assert set(b.topics) == {PROD}


def test_refusals_create_nothing() -> None:
    b = broker()
    b.topics["dirty"] = [1, 0, 0]
    with pytest.raises(ActionStateIsolationError, match=r"'dirty' for variant 'candidate' already has data"):
        FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b", "candidate": "dirty"})
    b.topics["narrow"] = [0]
    with pytest.raises(ActionStateIsolationError, match=r"'narrow' has 1 partitions, production has 3"):
        FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b", "candidate": "narrow"})
    with pytest.raises(ActionStateIsolationError, match=r"'missing-prod' does not exist.*Fix: .*partitions="):
        FakeTopicsHook(b).isolate_action_state("missing-prod", {"baseline": "rp-b"})
    assert set(b.topics) == {PROD, "dirty", "narrow"}


def test_existing_empty_topic_is_reused_and_partitions_may_be_given() -> None:
    b = broker()
    b.topics["rp-b"] = [0, 0, 0]
    iso = FakeTopicsHook(b).isolate_action_state(PROD, {"baseline": "rp-b"})
    assert iso.created == []
    iso = FakeTopicsHook(b).isolate_action_state("missing-prod", {"candidate": "rp-c"}, partitions=2)
    assert iso.created == ["rp-c"] and iso.partitions == 2 and iso.production_end_offsets_before == {}


def test_cleanup_deletes_replay_topics_and_reports_productions_offsets() -> None:
    b = broker()
    b.topics.update({"rp-b": [1, 0, 0], "rp-c": [0, 0, 0]})
    hook = FakeTopicsHook(b)
    with pytest.raises(ActionStateIsolationError, match=r"refusing to delete 'prod-action-state'"):
        hook.delete_replay_topics(["rp-b", PROD], production_topic=PROD)
    b.topics[PROD] = [2, 2, 1]
    out = hook.delete_replay_topics(
        ["rp-b", "rp-c", "gone"], production_topic=PROD, production_end_offsets_before={"0": 2, "1": 1, "2": 1}
    )
    assert (out.deleted, out.missing) == (["rp-b", "rp-c"], ["gone"])
    assert out.replay_topic_end_offsets == {"rp-b": {0: 1, 1: 0, 2: 0}, "rp-c": {0: 0, 1: 0, 2: 0}}
    assert out.production_records_written_meanwhile == 1 and "may have written them" in out.note
    assert set(b.topics) == {PROD}


def test_operators_are_one_hook_call_and_fail_the_task_on_a_refusal() -> None:
    assert issubclass(ActionStateIsolationError, FlinkReplayError)
    b = broker()
    op = IsolateActionStateOperator(task_id="isolate", production_topic=PROD, variants=["baseline", "candidate"])
    op.__dict__["hook"] = FakeTopicsHook(b)
    out = op.execute({"run_id": "manual__2026-01-01T00:00:00+00:00"})
    assert out["topics"]["candidate"] == "prod-action-state-replay-manual__2026-01-01T00-00-00-00-00-candidate"
    assert out["production_end_offsets_before"] == {"0": 2, "1": 1, "2": 1}
    b.topics[out["topics"]["baseline"]] = [1, 0, 0]
    op.__dict__["hook"] = FakeTopicsHook(b)
    with pytest.raises(AirflowException, match="already has data"):
        op.execute({"run_id": "manual__2026-01-01T00:00:00+00:00"})
    cleanup = DeleteReplayTopicsOperator(task_id="cleanup", isolation=out)
    cleanup.__dict__["hook"] = FakeTopicsHook(b)
    assert sorted(cleanup.execute({})["deleted"]) == sorted(out["topics"].values())
    bad = DeleteReplayTopicsOperator(task_id="bad", topics=[PROD], production_topic=PROD)
    bad.__dict__["hook"] = FakeTopicsHook(b)
    with pytest.raises(AirflowException, match="refusing to delete"):
        bad.execute({})

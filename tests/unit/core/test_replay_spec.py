"""One naming rule for the replay's action-state topics (``replay_topic_name``): Kafka-legal, distinct per
variant, the same for the DAG's resolved names and ``IsolateActionStateOperator``'s defaults.

(Spec loading, overrides and the preflight rules: tests/unit/test_replay_spec_and_preflight.py.)
"""

from __future__ import annotations

from airflow_flink_replay.core.replay_spec import (
    MAX_TOPIC_NAME,
    ReplaySpec,
    is_legal_topic_name,
    replay_topic_name,
)
from airflow_flink_replay.operators.action_state import IsolateActionStateOperator
from tests.unit.test_replay_spec_and_preflight import _spec


def test_the_spec_names_topics_by_the_one_rule() -> None:
    spec = ReplaySpec.model_validate(_spec())
    topics = {v: spec.action_state_topic("abc123", v) for v in spec.variants()}
    assert topics == {
        "baseline": "reviews-action-state-replay-review-triage-abc123-baseline",
        "baseline_2": "reviews-action-state-replay-review-triage-abc123-baseline_2",
        "candidate": "reviews-action-state-replay-review-triage-abc123-candidate",
    }
    op = IsolateActionStateOperator(
        task_id="isolate", production_topic=spec.production.action_state_topic, variants=spec.variants()
    )
    assert op.plan_topics("review-triage-abc123") == topics  # the operator's defaults are the same names


def test_replay_topic_names_are_always_kafka_legal_and_distinct() -> None:
    assert replay_topic_name("prod.as", "manual__2026-01-01T00:00:00+00:00", "candidate") == (
        "prod.as-replay-manual__2026-01-01T00-00-00-00-00-candidate"
    )
    long = ["x" * 240 + "-action-state", "manual__" + "r" * 250]
    names = {replay_topic_name(long[0], long[1], v) for v in ("baseline", "baseline_2", "candidate")}
    assert len(names) == 3 and all(is_legal_topic_name(n) and len(n) == MAX_TOPIC_NAME for n in names)
    assert not is_legal_topic_name("") and not is_legal_topic_name("a b") and not is_legal_topic_name("a" * 250)
    assert is_legal_topic_name("a" * 249)
